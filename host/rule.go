package host

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// maxConsecutiveFailures disables a rule whose handler fails this many times
// in a row; a new version of its file enables it again.
const maxConsecutiveFailures = 10

// maxEchoes bounds the versions remembered per key for echo suppression.
const maxEchoes = 32

// delivery is one event queued for a rule, with its lineage.
type delivery struct {
	ev    abi.Event
	hop   int
	chain []string
}

// rule is the slot of one rule file: its mailbox and goroutine outlive the
// versions of the file that run in it, so a reload swaps the script between
// two events and the queue carries over.
type rule struct {
	h    *Host
	path string
	name string // file name, used in logs and as the lock holder suffix
	kind string

	mailbox    *mailbox
	ctrl       chan func()
	lostSignal chan struct{} // cap 1: lost locks queued in lost
	done       chan struct{}
	wg         sync.WaitGroup // lease renewals
	// ctx bounds the rule's handler calls; cancel ends a handler stuck in
	// Handle (e.g. waiting for a crashed plugin's restart) when the rule is
	// removed.
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by the rule goroutine.
	cur         *instance
	consecutive int
	exiting     bool

	mu       sync.Mutex
	cfg      RuleConfig
	watches  map[string]abi.WatchOptions
	ownSets  map[string][]string // key -> versions written by this rule, awaiting their echo
	ownDels  map[string]int      // key -> DELETE echoes owed
	locks    map[string]*lease
	lost     []string // locks lost, LOCK_LOST not yet delivered
	hash     [32]byte // content of the running version
	hop      int      // lineage of the event being handled
	chain    []string //
	disabled bool

	handled, failed, dropped, echoes atomic.Uint64
	lastDropLog                      atomic.Int64
}

// instance is one running version of a rule file.
type instance struct {
	script abi.Script
	b      *binding
	hash   [32]byte
}

func newRule(h *Host, path, kind string, cfg RuleConfig) *rule {
	r := &rule{
		h:          h,
		path:       path,
		name:       filepath.Base(path),
		kind:       kind,
		cfg:        cfg,
		mailbox:    newMailbox(cfg.Mailbox),
		ctrl:       make(chan func()),
		lostSignal: make(chan struct{}, 1),
		done:       make(chan struct{}),
		watches:    map[string]abi.WatchOptions{},
		ownSets:    map[string][]string{},
		ownDels:    map[string]int{},
		locks:      map[string]*lease{},
	}
	r.ctx, r.cancel = context.WithCancel(h.ctx)
	return r
}

// run is the rule goroutine: events one at a time; control functions (swap,
// stop) and lock losses between events.
func (r *rule) run() {
	ctx := r.ctx
	defer close(r.done)
	for !r.exiting {
		select {
		case f := <-r.ctrl:
			f()
		case <-r.lostSignal:
			r.mu.Lock()
			lost := r.lost
			r.lost = nil
			r.mu.Unlock()
			for _, name := range lost {
				r.deliver(ctx, delivery{ev: abi.Event{Key: name, Op: abi.OpLockLost}})
			}
		case <-r.mailbox.ready:
			if d, ok := r.mailbox.pop(); ok {
				r.deliver(ctx, d)
			}
		}
	}
}

// do runs f in the rule goroutine between two events and waits for it.
func (r *rule) do(ctx context.Context, f func()) error {
	finished := make(chan struct{})
	select {
	case r.ctrl <- func() { defer close(finished); f() }:
	case <-r.done:
		return errRuleStopped
	case <-ctx.Done():
		return ctx.Err()
	}
	<-finished // the goroutine runs f to completion before it can exit
	return nil
}

var errRuleStopped = errors.New("rule stopped")

// enqueue offers an event to the mailbox without blocking; a full mailbox
// drops it, counts it and logs at most once a second.
func (r *rule) enqueue(d delivery) {
	if !r.mailbox.push(d) {
		n := r.dropped.Add(1)
		now := time.Now().UnixNano()
		if last := r.lastDropLog.Load(); now-last > int64(time.Second) && r.lastDropLog.CompareAndSwap(last, now) {
			r.h.log.Warn("rule mailbox full: event dropped", "rule", r.name, "key", d.ev.Key, "dropped_total", n, "mailbox", r.mailbox.limit)
		}
	}
}

func (r *rule) deliver(ctx context.Context, d delivery) {
	if r.cur == nil {
		return
	}
	r.mu.Lock()
	if d.ev.Op != abi.OpLockLost {
		opts, ok := r.watches[d.ev.Key]
		if !ok {
			r.mu.Unlock()
			return // no longer watched (unwatched or dropped by a reload)
		}
		if !opts.Self && r.consumeEchoLocked(d.ev) {
			r.mu.Unlock()
			r.echoes.Add(1)
			return
		}
	}
	if r.disabled {
		r.mu.Unlock()
		r.dropped.Add(1)
		return
	}
	r.hop, r.chain = d.hop, d.chain
	r.mu.Unlock()

	err := r.cur.script.Handle(ctx, d.ev)
	if err == nil {
		r.handled.Add(1)
		r.consecutive = 0
		return
	}
	if ctx.Err() != nil {
		return // shutting down
	}
	r.failed.Add(1)
	r.consecutive++
	r.h.log.Error("rule failed", "rule", r.name, "key", d.ev.Key, "op", string(d.ev.Op), "kind", failureKind(err), "err", err)
	if r.consecutive >= maxConsecutiveFailures {
		r.mu.Lock()
		r.disabled = true
		r.mu.Unlock()
		r.h.log.Error("rule disabled after repeated failures; save a fixed version of the file to restart it",
			"rule", r.name, "failures", r.consecutive)
	}
}

func failureKind(err error) string {
	switch {
	case errors.Is(err, abi.ErrTimeout):
		return "timeout"
	case errors.Is(err, abi.ErrMemory):
		return "memory"
	case errors.Is(err, abi.ErrCrashed):
		return "crash"
	}
	return "error"
}

// consumeEchoLocked reports whether ev is the echo of this rule's own write,
// and forgets that write.
func (r *rule) consumeEchoLocked(ev abi.Event) bool {
	switch ev.Op {
	case abi.OpSet:
		vs := r.ownSets[ev.Key]
		for i, v := range vs {
			if v == ev.Version {
				r.ownSets[ev.Key] = append(vs[:i], vs[i+1:]...)
				if len(r.ownSets[ev.Key]) == 0 {
					delete(r.ownSets, ev.Key)
				}
				return true
			}
		}
	case abi.OpDelete:
		if r.ownDels[ev.Key] > 0 {
			r.ownDels[ev.Key]--
			if r.ownDels[ev.Key] == 0 {
				delete(r.ownDels, ev.Key)
			}
			return true
		}
	}
	return false
}

// beginWrite registers a delete of key with the feedback-loop damper before
// it is sent (its notification can beat its reply) and returns the function
// that ends it with the outcome: deleted or not (version is empty).
func (r *rule) beginWrite(key string) func(version string, deleted bool) {
	return r.beginSet(key, 0)
}

// beginSet is beginWrite for a SET that expires after ttl (0: never): the
// DELETE of its expiry continues its lineage.
func (r *rule) beginSet(key string, ttl time.Duration) func(version string, deleted bool) {
	r.mu.Lock()
	hop, chain := r.hop, r.chain
	r.mu.Unlock()
	end := r.h.lin.begin(key, hop, chain, r.name, ttl)
	return func(version string, deleted bool) {
		end(version)
		if version != "" || deleted {
			r.wrote(key, version, deleted)
		}
	}
}

// wrote records a write of this rule for echo suppression (only on watched
// keys without self).
func (r *rule) wrote(key, version string, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	opts, ok := r.watches[key]
	if !ok || opts.Self {
		return
	}
	if deleted {
		r.ownDels[key]++
		return
	}
	vs := append(r.ownSets[key], version)
	if len(vs) > maxEchoes {
		vs = vs[len(vs)-maxEchoes:]
	}
	r.ownSets[key] = vs
}

// swap installs a started instance between two events: applies the watch
// diff, makes the new binding live and closes the old script. It runs in the
// rule goroutine.
func (r *rule) swap(ctx context.Context, next *instance) {
	r.mu.Lock()
	want := next.b.staged
	next.b.staged = nil
	var add, drop []string
	for k := range want {
		if _, ok := r.watches[k]; !ok {
			add = append(add, k)
		}
	}
	for k := range r.watches {
		if _, ok := want[k]; !ok {
			drop = append(drop, k)
		}
	}
	r.mu.Unlock()
	for _, k := range add {
		if err := r.h.reg.watch(ctx, r, k); err != nil {
			r.h.log.Error("watch failed", "rule", r.name, "key", k, "err", err)
			delete(want, k)
		}
	}
	for _, k := range drop {
		r.h.reg.unwatch(ctx, r, k)
	}
	r.mu.Lock()
	r.watches = want
	for k := range r.ownSets {
		if _, ok := want[k]; !ok {
			delete(r.ownSets, k)
		}
	}
	r.disabled = false
	r.hash = next.hash
	next.b.live.Store(true)
	r.mu.Unlock()
	old := r.cur
	r.cur = next
	r.consecutive = 0
	if old != nil {
		old.b.closed.Store(true)
		if err := old.script.Close(ctx); err != nil {
			r.h.log.Warn("closing previous version failed", "rule", r.name, "err", err)
		}
	}
}

// stop closes the script, releases its watches and locks, and ends the rule
// goroutine. It runs in the rule goroutine.
func (r *rule) stop(ctx context.Context) {
	r.exiting = true
	if r.cur != nil {
		r.cur.b.closed.Store(true)
		if err := r.cur.script.Close(ctx); err != nil {
			r.h.log.Warn("closing rule failed", "rule", r.name, "err", err)
		}
	}
	r.mu.Lock()
	keys := make([]string, 0, len(r.watches))
	for k := range r.watches {
		keys = append(keys, k)
	}
	r.watches = map[string]abi.WatchOptions{}
	locks := r.locks
	r.locks = map[string]*lease{}
	r.mu.Unlock()
	for _, k := range keys {
		r.h.reg.unwatch(ctx, r, k)
	}
	for _, l := range locks {
		r.releaseLease(ctx, l)
	}
	r.wg.Wait()
}

// addWatch registers a watch made by a live version.
func (r *rule) addWatch(ctx context.Context, key string, opts abi.WatchOptions) error {
	r.mu.Lock()
	if _, ok := r.watches[key]; ok {
		r.watches[key] = opts
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	if err := r.h.reg.watch(ctx, r, key); err != nil {
		return storeError(err)
	}
	r.mu.Lock()
	r.watches[key] = opts
	r.mu.Unlock()
	return nil
}

func (r *rule) removeWatch(ctx context.Context, key string) error {
	r.mu.Lock()
	_, ok := r.watches[key]
	delete(r.watches, key)
	delete(r.ownSets, key)
	delete(r.ownDels, key)
	r.mu.Unlock()
	if !ok {
		return abi.Errorf(abi.StatusNotFound, "unwatch %q: not watched", key)
	}
	r.h.reg.unwatch(ctx, r, key)
	return nil
}

// RuleStatus describes one loaded rule.
type RuleStatus struct {
	Path     string
	Kind     string
	Watches  []string
	Locks    []string
	Handled  uint64 // events handled successfully
	Failed   uint64 // handler calls that failed (timeout, memory, crash, error)
	Dropped  uint64 // events dropped: mailbox full, or rule disabled
	Echoes   uint64 // events skipped as echoes of the rule's own writes
	Disabled bool
}

func (r *rule) status() RuleStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := RuleStatus{Path: r.path, Kind: r.kind, Disabled: r.disabled,
		Handled: r.handled.Load(), Failed: r.failed.Load(), Dropped: r.dropped.Load(), Echoes: r.echoes.Load()}
	for k := range r.watches {
		s.Watches = append(s.Watches, k)
	}
	for k := range r.locks {
		s.Locks = append(s.Locks, k)
	}
	return s
}

func (r *rule) String() string { return fmt.Sprintf("%s rule %s", r.kind, r.path) }
