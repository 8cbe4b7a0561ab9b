package host

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/abandon"
	"github.com/ssrun/ssrun/host/internal/echo"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/internal/logbudget"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/internal/observe"
	"github.com/ssrun/ssrun/host/internal/patternwatch"
	"github.com/ssrun/ssrun/host/internal/ruletimers"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// maxConsecutiveFailures disables a rule whose handler fails this many times
// in a row; a new version of its file enables it again.
const maxConsecutiveFailures = 10

// rule is the slot of one rule file: its mailbox and worker outlive the
// versions of the file that run in it, so a reload swaps the script between
// two events and the queue carries over. Its lock, mu, is taken in this file
// only: the binding, the worker and the host ask the rule through methods.
type rule struct {
	path string
	name string // file name, used in logs and as the lock holder suffix
	kind string

	svc *services // its log, reg, lin and calls; client, now and ctx are its leases'

	mailbox *mailbox.Box
	quiet   *serial.Rule // its part in a serial host's activity (internal/serial)
	locks   *lease.Leases
	logs    *logbudget.Budget
	timers  *ruletimers.Timers
	// ctx bounds the rule's handler calls; cancel ends a handler stuck in
	// Handle (e.g. waiting for a crashed plugin's restart) when the rule is
	// removed.
	ctx    context.Context
	cancel context.CancelFunc

	// Owned by the live worker (by the host while there is none, or once it
	// has abandoned it).
	cur         *instance
	consecutive atomic.Int64 // handler failures in a row (atomic: a pool's calls end at once)

	mu       sync.Mutex
	w        *worker // the live worker
	released bool    // watches and locks released: no watch may be added
	disabled bool
	cfg      RuleConfig
	watches  map[string]abi.WatchOptions
	pats     *patternwatch.Rule // its pattern watches (host/internal/patternwatch)
	own      echo.Pending       // this rule's writes on watched keys, awaiting their echo
	hash     [32]byte           // content of the running version
	pooled   bool               // the running version runs a pool (concurrency > 1)
	// The last failure, handler or load, for status; reloadErr while the
	// file's newest version failed to load and the previous one runs.
	lastErr   string
	lastErrAt time.Time
	reloadErr bool
	lin       provenance.Lineage // lineage of the event being handled
	cause     provenance.Cause   // the event being handled, for the journal
	// shadow is a new version running next to the live one, set and
	// ended by the worker; canaryRefused once such a version was refused.
	shadow        shadowVersion
	canaryRefused bool
	// progress records the watched keys' versions handled, for the next
	// owner of a rule shared by a group (nil: not shared; see
	// host/internal/group).
	progress *membership.Progress

	running cuttable // the call a newer change of its key may cut (restart.go)

	handled, failed, dropped, echoes, abandons atomic.Uint64
	coalesced                                  atomic.Uint64 // events replaced in the mailbox by a newer change of their key
	restarted                                  atomic.Uint64 // calls cut by a newer change of their key (restart.go)
	restart                                    atomic.Bool   // the mode is restart
	lastDropLog                                atomic.Int64
}

// instance is one version of a rule file: its script once started, and
// what its binding checks on every call.
type instance struct {
	script abi.Script
	hash   [32]byte
	closed atomic.Bool // replaced or stopped: its calls fail
	// members, when the rule's concurrency is above 1, are the instances
	// of its pool: script first, then its replicas (see replica.go); nil
	// otherwise.
	members []poolMember

	// While the version starts, its watches are staged, not applied, so the
	// old version keeps its own; swap applies them and makes it live,
	// holding mu meanwhile.
	mu     sync.Mutex
	live   bool
	staged map[string]abi.WatchOptions
}

func newInstance(hash [32]byte) *instance {
	return &instance{hash: hash, staged: map[string]abi.WatchOptions{}}
}

func newRule(s *services, path, kind string, cfg RuleConfig) *rule {
	name := filepath.Base(path)
	rq := &serial.Rule{}
	r := &rule{
		path:    path,
		name:    name,
		kind:    kind,
		svc:     s,
		cfg:     cfg,
		quiet:   rq,
		mailbox: mailbox.New(cfg.Mailbox, cfg.MailboxKeys, s.quiet, rq),
		locks:   lease.New(s.leaseServices(), name, rq),
		logs:    logbudget.New(s.log, s.clock, name, cfg.LogLines, cfg.LogBytes),
		watches: map[string]abi.WatchOptions{},
		own:     echo.New(),
	}
	r.locks.InCall = func() bool {
		w := r.worker()
		return w != nil && w.inFlight() > 0
	}
	r.setMode(cfg.Mode)
	r.timers = ruletimers.New(s.timerServices(), name, r.mailbox)
	r.ctx, r.cancel = context.WithCancel(s.ctx)
	if s.group != nil {
		r.progress = s.group.ProgressFor(name)
	}
	r.pats = patternwatch.NewRule(s.pats, s.reg, s.lin, path, name, r.mailbox, r.progress, patternOwner{r})
	return r
}

// Enqueue offers an event to the mailbox without blocking. A full mailbox
// conflates it with its key's waiting event (counted), or drops it past
// its bound of keys (counted, and logged at most once a second).
func (r *rule) Enqueue(d mailbox.Delivery) {
	out, replaced := r.mailbox.PushReplacing(d)
	switch out {
	case mailbox.Queued:
		r.cutRunning(d.Ev.Key)
	case mailbox.Coalesced:
		r.coalesced.Add(1)
		observe.Coalesced(r.svc.trace, r.name, replaced.Ev, replaced.Lin, d.Ev.Version, r.svc.clock)
		r.cutRunning(d.Ev.Key)
	case mailbox.Dropped:
		observe.Skipped(r.svc.trace, r.name, d.Ev, d.Lin, SkipMailboxFull, r.svc.clock)
		n := r.dropped.Add(1)
		now := r.svc.clock.Now().UnixNano()
		if last := r.lastDropLog.Load(); now-last > int64(time.Second) && r.lastDropLog.CompareAndSwap(last, now) {
			cfg := r.config()
			r.svc.log.Warn("rule mailbox full of distinct keys: event dropped", "rule", r.name, "key", d.Ev.Key, "dropped_total", n,
				"mailbox", cfg.Mailbox, "mailbox_keys", cfg.MailboxKeys)
		}
	}
}

// setMode applies RuleConfig.Mode: latest and restart conflate always.
func (r *rule) setMode(mode string) {
	r.mailbox.SetLatest(mode == ModeLatest || mode == ModeRestart)
	r.restart.Store(mode == ModeRestart)
}

// config returns the rule's settings.
func (r *rule) config() RuleConfig {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg
}

// reconfigure applies the settings of a new version of the file.
func (r *rule) reconfigure(cfg RuleConfig) {
	r.mu.Lock()
	r.cfg = cfg
	r.mu.Unlock()
	r.logs.SetLimits(cfg.LogLines, cfg.LogBytes)
	r.mailbox.SetLimit(cfg.Mailbox, cfg.MailboxKeys)
	r.setMode(cfg.Mode)
	r.pats.Reconfigure(r.svc.ctx, patternSettings(cfg))
}

// watchesOutside returns the keys r watches that patterns do not allow,
// in no order.
func (r *rule) watchesOutside(patterns []string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for k := range r.watches {
		if !allowed(patterns, k) {
			out = append(out, k)
		}
	}
	return out
}

// shadowVersion is a new version of the rule running in shadow next to the
// live one until it is proven or refused: a canary (see canary.go). The
// worker hands it each event before the live version, then judges it.
type shadowVersion interface {
	// handle hands ev to the shadow in the worker w; false when w was
	// abandoned in the call.
	handle(w *worker, ev abi.Event, timeout time.Duration) bool
	// judge compares what both versions wrote for ev, and may end the
	// shadow: refused, or swapped in once its window is over.
	judge(ctx context.Context, ev abi.Event)
	// due swaps the shadow in if its window is over, between two events.
	due()
	// wroteLive records a write of the live version.
	wroteLive(op, key string, value []byte)
	// end drops the shadow (why is logged unless empty).
	end(ctx context.Context, why string)
}

// shadowing returns the version running in shadow, or nil.
func (r *rule) shadowing() shadowVersion {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shadow
}

// canaryIdle reports whether no version runs in shadow and none was
// refused.
func (r *rule) canaryIdle() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.shadow == nil && !r.canaryRefused
}

// setShadow makes sh the version in shadow (nil: none), clearing a
// refusal.
func (r *rule) setShadow(sh shadowVersion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.shadow, r.canaryRefused = sh, false
}

// dropShadow ends sh's time in shadow, if it is still the one.
func (r *rule) dropShadow(sh shadowVersion) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.shadow == sh {
		r.shadow = nil
	}
}

// refuseCanary records that a version in shadow was refused, why being
// the rule's last error.
func (r *rule) refuseCanary(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteErrorLocked(why)
	r.canaryRefused = true
}

// watchedKeys returns the keys the running version watches.
func (r *rule) watchedKeys() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	keys := make([]string, 0, len(r.watches))
	for k := range r.watches {
		keys = append(keys, k)
	}
	return keys
}

// runsPool reports whether the running version runs a pool of instances
// (concurrency > 1).
func (r *rule) runsPool() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pooled
}

// runs reports whether the running version has content hash.
func (r *rule) runs(hash [32]byte) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.hash == hash
}

// startWorker starts a worker for r and makes it the live one.
func (r *rule) startWorker() *worker {
	w := newWorker(r.ctx, r.svc, "handle "+r.name, r.config().Grace)
	r.mu.Lock()
	r.w = w
	r.mu.Unlock()
	// A worker abandoned in a call may have left events and lost locks
	// waiting, their signal already taken.
	if r.mailbox.Len() > 0 {
		r.mailbox.Signal()
	}
	if r.locks.Losing() {
		r.locks.SignalLost()
	}
	w.run(func() { r.loop(w) })
	return w
}

// worker returns the live worker, or nil.
func (r *rule) worker() *worker {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.w
}

// loop runs the worker w: one event at a time (run), or with a version
// of concurrency > 1 its pool (runPool), switching when a reload changes
// the concurrency, until w ends.
func (r *rule) loop(w *worker) {
	for {
		var more bool
		if in := r.cur; in != nil && in.members != nil {
			more = r.runPool(w)
		} else {
			more = r.run(w)
		}
		if !more {
			return
		}
	}
}

// run is the loop of the worker w: a stop request first, then control
// functions, lost locks and events, one at a time. It returns true when a
// control function installed a version of concurrency > 1 (see loop),
// false when w ends.
func (r *rule) run(w *worker) bool {
	for {
		select {
		case <-w.quit: // first, before anything else that is ready
			r.shutdown(w.stopCtx)
			return false
		default:
		}
		// While no version runs (the last one was abandoned and the next
		// is not swapped in yet), events wait in the mailbox for it.
		var ready <-chan struct{}
		if r.cur != nil {
			ready = r.mailbox.Ready
		}
		select {
		case <-w.quit:
			r.shutdown(w.stopCtx)
			return false
		case f := <-w.ctrl:
			f()
			if in := r.cur; in != nil && in.members != nil {
				return true
			}
		case <-r.locks.LostSignal():
			for _, l := range r.locks.TakeLost() {
				ok := r.deliver(w, mailbox.Delivery{Ev: abi.Event{Key: l.Name, Op: abi.OpLockLost}, Ticket: l.Ticket})
				r.svc.quiet.Work(r.quiet, -1)
				if !ok {
					return false
				}
			}
		case <-ready:
			if sh := r.shadowing(); sh != nil {
				sh.due() // its window may have ended with no event
			}
			w.taken.Add(1) // in flight before it leaves the mailbox (inFlight)
			d, ok := r.mailbox.Pop()
			r.timers.Refill() // timers that were due while the mailbox was full
			if !ok {
				w.taken.Add(-1)
				continue
			}
			delivered := r.deliver(w, d)
			r.mailbox.Done()
			w.taken.Add(-1)
			if !delivered {
				return false
			}
		}
	}
}

// deliver hands d to the running version, in the worker w. It returns false
// when w was abandoned during the call: the rule is not its any more, and it
// must end (it has closed the instance it ran). A timer's firing is dropped
// when the timer was cancelled or re-armed since it was queued, held when
// no version runs (its worker was abandoned: the next version gets it), and
// recorded once the call returns (not when it was abandoned: see
// abandoned).
func (r *rule) deliver(w *worker, d mailbox.Delivery) bool {
	if d.Timer == nil {
		return r.call(w, d)
	}
	if r.cur == nil {
		r.timers.Hold(d.Timer, false)
		return true
	}
	if !r.timers.Take(d.Timer, &d.Ev) {
		return true
	}
	if !r.call(w, d) {
		return false
	}
	r.timers.Fired(d.Timer)
	return true
}

// call runs the handler of the running version on d, unless d is no
// longer for it (an unwatched key, an echo, a disabled rule).
func (r *rule) call(w *worker, d mailbox.Delivery) bool {
	in := r.cur
	if in == nil {
		return true
	}
	r.mu.Lock()
	if why := r.skipLocked(d); why != "" {
		r.mu.Unlock()
		r.skipped(d, why)
		return true
	}
	r.lin, r.cause = d.Lin, provenance.CauseOf(d.Ev, d.Lin)
	timeout := r.cfg.Timeout
	shadow := r.shadow
	r.mu.Unlock()
	// The call's deadline starts once it has a place (see internal/gate), and
	// in a serial host its turn (internal/serial).
	if err := r.svc.gate.Enter(w.ctx, &w.cs.gated); err != nil {
		return true // shutting down
	}
	if q := r.svc.quiet; q != nil {
		if err := q.Enter(w.ctx, r.quiet, d.Ticket); err != nil {
			r.svc.gate.Leave(&w.cs.gated)
			return true
		}
		defer q.Leave(r.quiet)
	}
	if shadow != nil && !shadow.handle(w, d.Ev, timeout) {
		r.svc.gate.Leave(&w.cs.gated)
		return false
	}

	var start time.Time
	if r.svc.obs != nil || r.svc.trace != nil {
		start = time.Now()
	}
	if r.svc.rec != nil { // what the rule sees, for a trace (see Recorder)
		r.svc.rec.RecordEvent(r.name, r.svc.timers.Clock.NowMs(), d.Ev)
	}
	call := w.begin(timeout, d.Ev.Key, d.Ev.Op)
	ctx, endCuttable := r.beginCuttable(w.ctx, d.Ev)
	err := in.script.Handle(ctx, d.Ev)
	cut := endCuttable()
	r.svc.gate.Leave(&w.cs.gated)
	r.mu.Lock()
	r.cause = provenance.Cause{} // a write outside a handler (at load, from a plugin's own goroutine) answers no event
	r.mu.Unlock()
	if !w.end(call) {
		if err := in.script.Close(context.Background()); err != nil {
			r.svc.log.Warn("closing an abandoned version failed", "rule", r.name, "err", err)
		}
		return false
	}
	if shadow != nil {
		shadow.judge(w.ctx, d.Ev)
	}
	r.after(w, d, start, err, cut)
	return true
}

// requeue puts d, an event a pool took and never started, back at the
// head of the mailbox for the rule's next worker, unless the rule was
// released (its mailbox dropped): r.mu is held across, so a release does
// not drop the mailbox between the check and the put.
func (r *rule) requeue(d mailbox.Delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.released {
		r.mailbox.PutBack(d)
	}
}

// skipReason is skipLocked, taking r.mu.
func (r *rule) skipReason(d mailbox.Delivery) SkipReason {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.skipLocked(d)
}

// skipLocked says why d is no longer for the running version ("": it
// is): an unwatched key, an echo of the rule's own write, a disabled rule.
// r.mu is held; skipped then accounts for it, unlocked.
func (r *rule) skipLocked(d mailbox.Delivery) SkipReason {
	if d.Ev.Op != abi.OpLockLost && d.Ev.Op != abi.OpTimer {
		opts, ok := r.watches[d.Ev.Key]
		if !ok {
			opts, ok = r.pats.Gets(d.Ev)
		}
		if !ok {
			return SkipUnwatched // no longer watched (unwatched or dropped by a reload)
		}
		if !opts.Self && r.own.Consume(d.Ev) {
			return SkipEcho
		}
	}
	if r.disabled {
		return SkipDisabled
	}
	return ""
}

// skipped traces and counts d, skipped for why (see skipLocked).
func (r *rule) skipped(d mailbox.Delivery, why SkipReason) {
	observe.Skipped(r.svc.trace, r.name, d.Ev, d.Lin, why, r.svc.clock)
	switch why {
	case SkipEcho:
		r.echoes.Add(1)
	case SkipDisabled:
		r.dropped.Add(1)
	}
}

// after accounts for a handler call on d that started at start (zero when
// neither observed nor traced) and returned err, cut when a newer change
// of its key cut it (mode restart): observed, traced, counted; a failure is
// logged and noted, and disables the rule after maxConsecutiveFailures in a
// row.
func (r *rule) after(w *worker, d mailbox.Delivery, start time.Time, err error, cut bool) {
	if r.svc.obs != nil {
		r.svc.obs.ObserveHandle(r.name, time.Since(start), err != nil)
	}
	observe.Ran(r.svc.trace, r.name, d.Ev, d.Lin, start, time.Since(start), err, clip)
	if err != nil && w.ctx.Err() != nil {
		// Stopped mid-call (shutting down, or handed over to another host
		// of a group): the event was not handled, so it is not recorded as
		// handled, and a group's next owner delivers it again.
		return
	}
	if err != nil && cut {
		// A newer change of the key, waiting now, stands for this one.
		r.restarted.Add(1)
		r.svc.log.Debug("handler restarted by a newer change of its key", "rule", r.name, "key", d.Ev.Key)
		return
	}
	if r.progress != nil {
		r.progress.Note(d.Ev)
	}
	if err == nil {
		r.handled.Add(1)
		r.consecutive.Store(0)
		return
	}
	n := r.consecutive.Add(1)
	r.svc.log.Error("rule failed", "rule", r.name, "key", d.Ev.Key, "op", string(d.Ev.Op), "kind", failureKind(err), "err", err)
	r.mu.Lock()
	r.noteErrorLocked(fmt.Sprintf("%s %s %q: %v", failureKind(err), d.Ev.Op, d.Ev.Key, err))
	r.disabled = r.disabled || n >= maxConsecutiveFailures
	r.mu.Unlock()
	// Counted after its error is noted: status loads the count, then reads
	// the error under r.mu, so a status that counts a failure shows it.
	r.failed.Add(1)
	if n >= maxConsecutiveFailures {
		r.svc.log.Error("rule disabled after repeated failures; save a fixed version of the file to restart it",
			"rule", r.name, "failures", n)
	}
}

func failureKind(err error) string {
	switch {
	case errors.Is(err, abi.ErrTimeout):
		return "timeout"
	case errors.Is(err, abi.ErrMemory):
		return "memory"
	case errors.Is(err, abi.ErrRaised): // the rule's own error, no crash
		return "error"
	case errors.Is(err, abi.ErrCrashed):
		return "crash"
	}
	return "error"
}

// write is one write of the rule to key, made by send, by an instance
// handling own's event (nil: the rule's, see handlingIn); verb names it in
// errors. It takes the fencing token of the lock fence ("" for none: a zero
// token), failing with LOCK_LOST when the rule does not hold the lock for
// certain; registers the write with the feedback-loop damper before send
// sends it (its notification can beat its reply), the DELETE of an expiry
// after ttl (0: none) continuing its lineage; and ends the registration on
// every path with what send reports: the version it created, or that it
// deleted the key, which is also remembered for echo suppression. A write
// that fails creates and deletes nothing.
func (r *rule) write(own *callCause, verb, key, fence string, ttl time.Duration, value []byte, send func(token hlc.HLC) (version string, deleted bool, err error)) error {
	if sh := r.shadowing(); sh != nil {
		sh.wroteLive(strings.ToUpper(verb), key, value)
	}
	token, err := r.locks.FenceToken(verb, key, fence)
	if err == nil && fence == "" && r.svc.group != nil { // a rule owned in a group: its lease fences
		token, err = r.svc.group.Fence(r.name, verb, key)
	}
	if err != nil {
		return err
	}
	from, cause := r.handlingIn(own)
	var (
		version string
		deleted bool
	)
	op := strings.ToUpper(verb)
	end := r.svc.lin.Begin(key, op, from, r.name, ttl)
	defer func() { end(version) }() // on every path, a panic in send too
	version, deleted, err = send(token)
	if err != nil && fence == "" && r.svc.group != nil {
		if tok, ok := r.svc.group.Refenced(r.ctx, r.name, err); ok {
			version, deleted, err = send(tok) // see Refenced: still the owner
		}
	}
	if err != nil {
		version, deleted = "", false
	}
	switch {
	case version != "" && !deleted:
		r.svc.pats.Wrote(r.path, key, value, version, ttl) // a pattern's key found at once
	case deleted:
		r.svc.pats.Deleted(key) // created again, it is rung for again
	}
	if version != "" || deleted {
		r.wrote(key, version, deleted)
		r.svc.journal.Wrote(r.svc.log, r.svc.clock.Now(), r.name, key, op, value, version, cause, from)
		observe.Wrote(r.svc.trace, r.name, key, op, version, cause)
	}
	return err
}

// handlingIn returns the event an instance is handling (zero outside a
// handler), and its lineage: own's for an instance of a pool, else the
// rule's.
func (r *rule) handlingIn(own *callCause) (provenance.Lineage, provenance.Cause) {
	if own != nil {
		return own.get()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lin, r.cause
}

// wrote records a write of this rule for echo suppression (only on watched
// keys without self).
func (r *rule) wrote(key, version string, deleted bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	opts, ok := r.watches[key]
	if !ok {
		opts, ok = r.pats.Covers(key)
	}
	if ok && !opts.Self {
		r.own.Wrote(key, version, deleted)
	}
}

// swap installs a started instance between two events: applies the watch
// diff, makes the new version live and closes the old script (bounded by
// the grace). It runs in the live worker. The new version's own watch calls
// wait meanwhile.
func (r *rule) swap(ctx context.Context, next *instance) {
	next.mu.Lock()
	want := next.staged
	next.staged = nil
	r.mu.Lock()
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
	for _, k := range r.watchAll(ctx, add) {
		delete(want, k)
	}
	for _, k := range drop {
		r.svc.reg.Unwatch(ctx, r, k)
	}
	r.mu.Lock()
	r.watches = want
	r.own.KeepSets(want)
	r.disabled = false
	r.hash = next.hash
	r.pooled = next.members != nil
	r.mu.Unlock()
	r.pats.Swap(ctx, next)
	next.live = true
	next.mu.Unlock()
	r.timers.GoLive(next)
	old := r.cur
	r.cur = next
	r.consecutive.Store(0)
	if old != nil {
		r.closeInstance(ctx, old, "previous version")
	}
}

// swapWatchers bounds the keys one swap registers at once.
const swapWatchers = 16

// watchAll adds r as a watcher of keys, registering those no rule watched
// yet with the store, up to swapWatchers at once (each a KEYNOTIFY and a
// read: a rule's watches wait for one round trip, not one per key). It
// returns the keys whose watch failed, logged.
func (r *rule) watchAll(ctx context.Context, keys []string) (failed []string) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, swapWatchers)
	for _, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := r.svc.reg.Watch(ctx, r, k); err != nil {
				r.svc.log.Error("watch failed", "rule", r.name, "key", k, "err", err)
				mu.Lock()
				failed = append(failed, k)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return failed
}

// closeInstance closes a version that no longer runs. The runtime's Close
// gets the grace as its deadline, and the grace again to return; past that
// it is abandoned.
func (r *rule) closeInstance(ctx context.Context, in *instance, what string) {
	in.closed.Store(true)
	grace := r.config().Grace
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	_, err := abandon.Aside(r.svc.calls, cctx, r.name, "close", grace, func(ctx context.Context) (struct{}, error) {
		return struct{}{}, in.closeScripts(ctx)
	}, nil)
	if err != nil {
		r.svc.log.Warn("closing "+what+" failed", "rule", r.name, "err", err)
	}
}

// closeScripts closes in's script and its pool's replicas.
func (in *instance) closeScripts(ctx context.Context) error {
	var errs []error
	if in.script != nil {
		errs = append(errs, in.script.Close(ctx))
	}
	for _, m := range in.members {
		if m.script != in.script {
			errs = append(errs, m.script.Close(ctx))
		}
	}
	return errors.Join(errs...)
}

// shutdown closes the script and releases the rule. It runs in the live
// worker, which then ends.
func (r *rule) shutdown(ctx context.Context) {
	if sh := r.shadowing(); sh != nil {
		sh.end(ctx, "")
	}
	if r.cur != nil {
		r.closeInstance(ctx, r.cur, "rule")
		r.cur = nil
	}
	r.release(ctx)
}

// stop ends the rule, for why ("remove", "shutdown"), once the caller has
// cancelled its context (a handler in progress ends now): the live worker
// stops it between two events, and stop waits until it has. A worker stuck
// in its call past the grace (counting from now if the call's deadline is
// later) is abandoned and the rule released from here. When ctx ends first,
// the worker is abandoned if it is in a call; otherwise it goes on to stop
// the rule itself and stop returns ctx's error.
func (r *rule) stop(ctx context.Context, why string) error {
	w := r.worker()
	if w == nil {
		return nil
	}
	err := w.stop(ctx, r.config().Grace)
	if errors.Is(err, errStuck) || (err != nil && ctx.Err() != nil && w.abandonNow()) {
		r.abandoned(w, why)
		r.release(ctx)
		return nil
	}
	if errors.Is(err, errRuleStopped) {
		return nil
	}
	return err
}

// discard undoes the first load of r, which failed: the rule never ran
// and the host never listed it, so nothing of it may stay. Its context is
// cancelled, the worker an install started is stopped, and its watches,
// the locks its starting version took and its timers are released; the
// timers its start armed or cancelled get their earlier records back, or
// none (see ruletimers.Timers.Undo). The release is bounded by the grace, not by
// ctx: ctx ending is often why the load failed, and an unlock sent under
// it would leave the lock in the store until its lease expires.
func (r *rule) discard(ctx context.Context) {
	r.cancel()
	grace := r.config().Grace
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	defer r.timers.Undo(ctx)
	if r.worker() != nil {
		if err := r.stop(ctx, "failed load"); err != nil { // the worker releases the rule as it stops
			r.svc.log.Warn("stopping the worker of a rule that failed to load", "rule", r.name, "err", err)
		}
		return
	}
	r.release(ctx)
}

// abandoned takes the rule over from w, which the caller abandoned in a
// handler call: w's context is cancelled, its instance is replaced or
// stopped (the worker closes it when its call returns), and the
// abandonment is counted and logged with why the host needed the rule.
func (r *rule) abandoned(w *worker, why string) {
	w.release(r.svc.gate)
	r.abandons.Add(1)
	if in := r.cur; in != nil {
		in.closed.Store(true)
	}
	r.cur = nil
	if sh := r.shadowing(); sh != nil {
		sh.end(context.Background(), why)
	}
	r.mu.Lock()
	if r.w == w {
		r.w = nil
	}
	cfg := r.cfg
	r.mu.Unlock()
	lost := w.lostCalls()
	if len(lost) == 0 { // cannot be: w was abandoned in a call
		lost = []lostCall{{}}
	}
	key, op, running := lost[0].key, lost[0].op, lost[0].running
	r.mu.Lock()
	r.noteErrorLocked(fmt.Sprintf("abandoned %s %q: the handler did not return within its deadline plus the grace", op, key))
	r.mu.Unlock()
	r.failed.Add(uint64(len(lost))) // after its error is noted, as in the handled path
	for _, c := range lost {
		if c.op == abi.OpTimer { // its firing was not recorded: the next version gets it again, late
			r.timers.Again(c.key)
		}
	}
	r.svc.log.Error("rule abandoned: its handler did not return within its deadline plus the grace; it is left to end on its own",
		"rule", r.name, "key", key, "op", string(op), "timeout", cfg.Timeout, "grace", cfg.Grace, "calls", len(lost),
		"running", running.Round(time.Millisecond), "for", why)
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
	r.mu.Unlock()
	for _, k := range keys {
		r.svc.reg.Unwatch(ctx, r, k)
	}
	r.pats.Release(ctx)
	r.locks.ReleaseAll(ctx)
	r.timers.Stop()
	r.logs.Close()
	r.mailbox.Drop()
}

// watch adds a watch of the version in: staged while it starts (swap
// applies it), registered at once when it is live.
func (r *rule) watch(ctx context.Context, in *instance, key string, opts abi.WatchOptions) error {
	in.mu.Lock()
	if !in.live {
		in.staged[key] = opts
		in.mu.Unlock()
		return nil
	}
	in.mu.Unlock()
	r.mu.Lock()
	if _, ok := r.watches[key]; ok {
		r.watches[key] = opts
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	if err := r.svc.reg.Watch(ctx, r, key); err != nil {
		return status.StoreError(err)
	}
	r.mu.Lock()
	if r.released { // stopped meanwhile (e.g. abandoned in this very call)
		r.mu.Unlock()
		r.svc.reg.Unwatch(ctx, r, key)
		return abi.Errorf(abi.StatusUnavailable, "watch %q: rule %s was stopped", key, r.name)
	}
	r.watches[key] = opts
	r.mu.Unlock()
	return nil
}

// unwatch removes a watch of the version in, staged or live.
func (r *rule) unwatch(ctx context.Context, in *instance, key string) error {
	in.mu.Lock()
	if !in.live {
		_, ok := in.staged[key]
		delete(in.staged, key)
		in.mu.Unlock()
		if !ok {
			return abi.Errorf(abi.StatusNotFound, "unwatch %q: not watched", key)
		}
		return nil
	}
	in.mu.Unlock()
	if !r.dropWatch(ctx, key) {
		return abi.Errorf(abi.StatusNotFound, "unwatch %q: not watched", key)
	}
	return nil
}

// dropWatch removes the live watch of key, if any, and reports whether
// there was one.
func (r *rule) dropWatch(ctx context.Context, key string) bool {
	r.mu.Lock()
	_, ok := r.watches[key]
	delete(r.watches, key)
	r.own.Forget(key)
	r.mu.Unlock()
	if ok {
		r.svc.reg.Unwatch(ctx, r, key)
	}
	return ok
}

// Rule states (RuleStatus.State).
const (
	StateRunning      = "running"
	StateDisabled     = "disabled"                             // after repeated failures, until the file changes
	StateStuck        = "stuck"                                // a handler call runs past its deadline plus the grace
	StateReloadFailed = "reload failed: previous version runs" // the file's newest version did not load
	StateLoadFailed   = "failed to load"                       // the file never loaded: nothing runs
	// A canary reload (RuleConfig.Canary): the new version runs in shadow,
	// or was refused (until the file changes again).
	StateCanary        = "canary: new version in shadow"
	StateCanaryRefused = "canary refused: previous version runs"
)

// maxLastError bounds RuleStatus.LastError.
const maxLastError = 1024

// RuleStatus describes one rule: a loaded one, or a rule file that failed
// to load (State StateLoadFailed, with only Path, Kind, Hash and the error).
type RuleStatus struct {
	Path string
	Kind string
	// Hash identifies the content of the running version (of the file that
	// failed, for StateLoadFailed): the first 12 hex digits of its SHA-256.
	Hash string
	// State is one of the State* constants.
	State string
	// LastError is the last handler or load failure (at most 1 KiB), and
	// LastErrorAt when it happened; empty and zero if there was none.
	LastError   string
	LastErrorAt time.Time
	// NextRetry, for StateLoadFailed, is when the host loads the file
	// again (its start failed: see DefaultLoadRetry); zero when it waits
	// for the file to change.
	NextRetry time.Time
	Watches   []string
	// Patterns are the patterns the rule watches (watch_pattern), and
	// PatternKeys how many keys they cover.
	Patterns    []string
	PatternKeys int
	Locks       []string
	Handled     uint64 // events handled successfully
	Failed      uint64 // handler calls that failed (timeout, memory, crash, error)
	Dropped     uint64 // events dropped: mailbox full of distinct keys, or rule disabled
	// Coalesced counts changes that replaced a waiting change of their key
	// in a full mailbox (each handled as part of the newer one).
	Coalesced uint64
	// Restarted counts handler calls cut by a newer change of their key
	// (mode restart); they are not failures.
	Restarted uint64
	Echoes    uint64 // events skipped as echoes of the rule's own writes
	Timers    int    // timers armed (pending or firing)
	Queued    int    // events waiting in the mailbox now
	// InFlight is how many events the rule is handling now: the call
	// running, or with concurrency > 1 (RuleConfig.Concurrency) the events
	// its instances took from the mailbox, running or waiting for a place
	// among the host's concurrent calls; at most the concurrency.
	InFlight int
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
	s := RuleStatus{Path: r.path, Kind: r.kind, Locks: r.locks.Names(), Abandoned: r.abandons.Load(),
		Handled: r.handled.Load(), Failed: r.failed.Load(), Dropped: r.dropped.Load(), Echoes: r.echoes.Load(),
		Coalesced: r.coalesced.Load(), Restarted: r.restarted.Load()}
	s.LogLinesSuppressed, s.LogBytesSuppressed = r.logs.Suppressed()
	s.Timers = r.timers.Count()
	s.Queued = r.mailbox.Len()
	s.Patterns, s.PatternKeys = r.pats.Status()
	r.mu.Lock()
	defer r.mu.Unlock()
	s.Disabled = r.disabled
	s.Stuck = r.w != nil && r.w.stuck(r.cfg.Grace)
	if r.w != nil {
		s.InFlight = r.w.inFlight()
	}
	s.Hash = shortHash(r.hash)
	s.LastError, s.LastErrorAt = r.lastErr, r.lastErrAt
	switch {
	case s.Stuck:
		s.State = StateStuck
	case s.Disabled:
		s.State = StateDisabled
	case r.reloadErr:
		s.State = StateReloadFailed
	case r.canaryRefused:
		s.State = StateCanaryRefused
	case r.shadow != nil:
		s.State = StateCanary
	default:
		s.State = StateRunning
	}
	for k := range r.watches {
		s.Watches = append(s.Watches, k)
	}
	return s
}

// noteError records msg as the rule's last error.
func (r *rule) noteError(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noteErrorLocked(msg)
}

// watchesExactly reports whether the rule watches key with watch (not
// through a pattern: host/internal/patternwatch).
func (r *rule) watchesExactly(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.watches[key]
	return ok
}

// noteErrorLocked records msg as the rule's last error; r.mu is held.
func (r *rule) noteErrorLocked(msg string) { r.lastErr, r.lastErrAt = clip(msg), r.svc.clock.Now() }

// clip cuts an error message to maxLastError bytes.
func clip(msg string) string {
	if len(msg) > maxLastError {
		msg = strings.ToValidUTF8(msg[:maxLastError-3], "") + "..."
	}
	return msg
}

// loaded records the outcome of loading a new version of the file: err
// nil when the running version is the file's (then the rule is no longer
// in StateReloadFailed), else why the newest version did not load.
func (r *rule) loaded(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reloadErr = err != nil
	if err != nil {
		r.noteErrorLocked("reload: " + err.Error())
	}
}

// reloadFailed reports whether the file's newest version failed to load
// while the previous one runs (StateReloadFailed).
func (r *rule) reloadFailed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.reloadErr
}

// shortHash renders a content hash as in RuleStatus.Hash.
func shortHash(h [32]byte) string { return hex.EncodeToString(h[:6]) }

// WatcherName implements watch.Watcher: rules get a key's changes in the order
// of their paths.
func (r *rule) WatcherName() string { return r.path }

func (r *rule) String() string { return fmt.Sprintf("%s rule %s", r.kind, r.path) }

// patternOwner is a rule as its pattern watches see it
// (patternwatch.Owner).
type patternOwner struct{ r *rule }

func (o patternOwner) Settings() patternwatch.Settings { return patternSettings(o.r.config()) }
func (o patternOwner) Enqueue(d mailbox.Delivery)      { o.r.Enqueue(d) }
func (o patternOwner) WatchesExactly(key string) bool  { return o.r.watchesExactly(key) }
func (o patternOwner) NoteError(msg string)            { o.r.noteError(msg) }

// patternSettings are what a rule's pattern watches follow of cfg.
func patternSettings(cfg RuleConfig) patternwatch.Settings {
	return patternwatch.Settings{Rescan: cfg.Rescan, MaxWatchedKeys: cfg.MaxWatchedKeys,
		Readable: func(k string) bool { return patternReadable(cfg, k) }}
}
