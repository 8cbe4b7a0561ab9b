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

// rule is the slot of one rule file: its mailbox and worker outlive the
// versions of the file that run in it, so a reload swaps the script between
// two events and the queue carries over.
type rule struct {
	h    *Host
	path string
	name string // file name, used in logs and as the lock holder suffix
	kind string

	mailbox    *mailbox
	ctrl       chan func(*worker)
	lostSignal chan struct{}  // cap 1: lost locks queued in lost
	wg         sync.WaitGroup // lease renewals
	logs       *logBudget
	// ctx bounds the rule's handler calls; cancel ends a handler stuck in
	// Handle (e.g. waiting for a crashed plugin's restart) when the rule is
	// removed.
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by the live worker (by the host while there is none, or once it
	// has abandoned it).
	cur         *instance
	consecutive int

	mu       sync.Mutex
	w        *worker // the live worker
	released bool    // watches and locks released: no watch may be added
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

	handled, failed, dropped, echoes, abandons atomic.Uint64
	lastDropLog                                atomic.Int64
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
		ctrl:       make(chan func(*worker)),
		lostSignal: make(chan struct{}, 1),
		logs:       newLogBudget(h.log, filepath.Base(path), cfg),
		watches:    map[string]abi.WatchOptions{},
		ownSets:    map[string][]string{},
		ownDels:    map[string]int{},
		locks:      map[string]*lease{},
	}
	r.ctx, r.cancel = context.WithCancel(h.ctx)
	return r
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

// config returns the rule's settings.
func (r *rule) config() RuleConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// deliver hands d to the running version. It returns false when the worker
// was abandoned during the call: the rule is not its any more, and it must
// end (it has closed the instance it ran).
func (w *worker) deliver(d delivery) bool {
	r := w.r
	in := r.cur
	if in == nil {
		return true
	}
	r.mu.Lock()
	if d.ev.Op != abi.OpLockLost {
		opts, ok := r.watches[d.ev.Key]
		if !ok {
			r.mu.Unlock()
			return true // no longer watched (unwatched or dropped by a reload)
		}
		if !opts.Self && r.consumeEchoLocked(d.ev) {
			r.mu.Unlock()
			r.echoes.Add(1)
			return true
		}
	}
	if r.disabled {
		r.mu.Unlock()
		r.dropped.Add(1)
		return true
	}
	r.hop, r.chain = d.hop, d.chain
	w.key, w.op = d.ev.Key, d.ev.Op
	timeout := r.cfg.Timeout
	r.mu.Unlock()

	call := w.begin(timeout)
	err := in.script.Handle(w.ctx, d.ev)
	if !w.end(call) {
		if err := in.script.Close(context.Background()); err != nil {
			r.h.log.Warn("closing an abandoned version failed", "rule", r.name, "err", err)
		}
		return false
	}
	if err == nil {
		r.handled.Add(1)
		r.consecutive = 0
		return true
	}
	if w.ctx.Err() != nil {
		return true // shutting down
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
	return true
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
// diff, makes the new binding live and closes the old script (bounded by
// the grace). It runs in the live worker.
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
		r.closeInstance(ctx, old, "previous version")
	}
}

// closeInstance closes a version that no longer runs. The runtime's Close
// gets the grace as its deadline, and the grace again to return; past that
// it is abandoned.
func (r *rule) closeInstance(ctx context.Context, in *instance, what string) {
	in.b.closed.Store(true)
	grace := r.config().Grace
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_, err := aside(r.h.calls, cctx, r.name, "close", grace, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, in.script.Close(ctx)
	}, nil)
	if err != nil {
		r.h.log.Warn("closing "+what+" failed", "rule", r.name, "err", err)
	}
}

// stop closes the script, releases its watches and locks, and ends the
// worker. It runs in the live worker.
func (r *rule) stop(ctx context.Context, w *worker) {
	w.exiting = true
	if r.cur != nil {
		r.closeInstance(ctx, r.cur, "rule")
		r.cur = nil
	}
	r.release(ctx)
}

// release unregisters the rule's watches, releases its locks and flushes
// its log budget. After it, the rule adds no watch.
func (r *rule) release(ctx context.Context) {
	r.mu.Lock()
	r.released = true
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
		if err := r.releaseLease(ctx, l); err != nil {
			r.h.log.Warn("releasing lock failed", "rule", r.name, "lock", l.name, "err", err)
		}
	}
	r.wg.Wait()
	r.logs.close()
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
	if r.released { // stopped meanwhile (e.g. abandoned in this very call)
		r.mu.Unlock()
		r.h.reg.unwatch(ctx, r, key)
		return abi.Errorf(abi.StatusUnavailable, "watch %q: rule %s was stopped", key, r.name)
	}
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
	// Stuck is set while a handler call runs past its deadline plus the
	// grace; Abandoned counts the calls the host gave up on (see
	// RuleConfig.Grace), each also counted in Failed.
	Stuck     bool
	Abandoned uint64
	// Log lines and message bytes dropped by the log budget.
	LogLinesSuppressed uint64
	LogBytesSuppressed uint64
}

func (r *rule) status() RuleStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := RuleStatus{Path: r.path, Kind: r.kind, Disabled: r.disabled,
		Handled: r.handled.Load(), Failed: r.failed.Load(), Dropped: r.dropped.Load(), Echoes: r.echoes.Load(),
		Stuck: r.w != nil && r.w.stuck(r.cfg.Grace), Abandoned: r.abandons.Load()}
	s.LogLinesSuppressed, s.LogBytesSuppressed = r.logs.suppressed()
	for k := range r.watches {
		s.Watches = append(s.Watches, k)
	}
	for k := range r.locks {
		s.Locks = append(s.Locks, k)
	}
	return s
}

func (r *rule) String() string { return fmt.Sprintf("%s rule %s", r.kind, r.path) }
