package testrun

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// world is the in-memory host of one case: the store, the rules bound to
// it, the event queue and the virtual clock. The event loop (drain) runs
// in the caller's goroutine and each handler call in a goroutine of its
// own, waited for before the next (unless it parks in a lock wait); the
// runtimes call the bindings from inside Handle, so the state is under mu.
type world struct {
	mu    sync.Mutex
	now   int64  // virtual Unix ms
	seed  uint64 // of the rules' random numbers (Rand)
	seq   int    // version counter
	down  bool
	store map[string]*entry
	dirty map[string]bool // keys changed from outside while down
	rules []*binding      // in load order
	queue []delivery
	locks map[string]*binding // by lock name: the holder (other: another host)
	// newest is, by lock name, the newest fencing token the store issued
	// for it: a fenced write with an older one is refused (FENCED).
	newest map[string]int
	// other holds the locks a fence step gave to another host.
	other *binding
	// waiters are the handlers parked in a lock wait, in order; resumed
	// those woken since, for drain to wait on (lockwait.go).
	waiters []*lockWait
	resumed []*binding

	// What the current step produced.
	writes []string
	logs   []string

	// onWrite, when set, sees every write a rule makes (replay). Under mu.
	onWrite func(rule, op, key string, value []byte)
}

type entry struct {
	value   []byte
	version string
	expires int64 // Unix ms; 0 never
}

type delivery struct {
	to  *binding
	ev  abi.Event
	hop int // rule writes between the outside change and this event
}

// timer is an armed timer of a rule.
type timer struct {
	name     string
	deadline int64
	every    int64
	payload  []byte
}

// lease is a lock a rule holds: its fencing token (the version of its
// key's write), and the token's number (the version counter).
type lease struct {
	n     int
	token string
}

// binding is one rule bound to the world: its abi.Host.
type binding struct {
	w       *world
	name    string // file name, as in expectations
	cfg     host.RuleConfig
	script  abi.Script
	watches map[string]abi.WatchOptions
	timers  map[string]*timer
	held    map[string]lease // locks the rule believes it holds
	hop     int              // of the event being handled
	handled int
	failed  int
	// running is the result of the handler running in its goroutine (nil
	// when none runs); parked is signalled by a handler that waits for a
	// lock; ev is the event being handled. Used by drain only.
	running chan error
	parked  chan struct{}
	ev      abi.Event
}

func newWorld(start time.Time) *world {
	return &world{
		now:    start.UnixMilli(),
		store:  map[string]*entry{},
		dirty:  map[string]bool{},
		locks:  map[string]*binding{},
		newest: map[string]int{},
		other:  &binding{name: "another host"},
	}
}

// version returns a fresh store version, HLC-like text.
func (w *world) version() string {
	w.seq++
	return fmt.Sprintf("%015d:%05d:ssrun-test", w.now, w.seq)
}

// logf records a line of the step's log.
func (w *world) logf(format string, args ...any) {
	w.logs = append(w.logs, fmt.Sprintf(format, args...))
}

// notify queues ev for every rule watching its key, except by (the writer)
// unless it watches with Self. Under mu.
func (w *world) notify(ev abi.Event, by *binding, hop int) {
	if hop > host.DefaultMaxHops {
		w.logf("feedback loop between rules damped: event dropped key=%s hops=%d", ev.Key, hop)
		return
	}
	for _, r := range w.rules {
		opts, ok := r.watches[ev.Key]
		if !ok || (r == by && !opts.Self) {
			continue
		}
		w.queue = append(w.queue, delivery{to: r, ev: ev, hop: hop})
	}
}

// put writes key from outside (or a rule, by), notifying watchers. Under mu.
func (w *world) put(key string, value []byte, ttl time.Duration, by *binding, hop int) string {
	e := &entry{value: value, version: w.version()}
	if ttl > 0 {
		e.expires = w.now + max(ttl.Milliseconds(), 1)
	}
	w.store[key] = e
	if w.down {
		w.dirty[key] = true
		return e.version
	}
	w.notify(abi.Event{Key: key, Op: abi.OpSet, Value: value, Version: e.version}, by, hop)
	return e.version
}

// remove deletes key, notifying watchers; false when it was absent. Under mu.
func (w *world) remove(key string, by *binding, hop int) bool {
	if _, ok := w.store[key]; !ok {
		return false
	}
	delete(w.store, key)
	v := w.version()
	defer w.wakeWaiters() // a lock waited for may be free
	if w.down {
		w.dirty[key] = true
		return true
	}
	w.notify(abi.Event{Key: key, Op: abi.OpDelete, Version: v}, by, hop)
	return true
}

// up brings the store back: every rule watching a key that changed while
// it was down gets a resync event with the key's current state.
func (w *world) up() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down = false
	keys := make([]string, 0, len(w.dirty))
	for k := range w.dirty {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ev := abi.Event{Key: k, Op: abi.OpDelete, Resync: true, Version: w.version()}
		if e, ok := w.store[k]; ok {
			ev = abi.Event{Key: k, Op: abi.OpSet, Value: e.value, Version: e.version, Resync: true}
		}
		w.notify(ev, nil, 0)
	}
	clear(w.dirty)
}

// loseLock takes the lock name from the rule that holds it, or believes
// it does (after a fence step), and tells that rule.
func (w *world) loseLock(name string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, r := range w.rules {
		if _, ok := r.held[name]; !ok {
			continue
		}
		if w.locks[name] == r {
			delete(w.locks, name)
			// Its lease expired: the key is gone.
			if e, ok := w.store[name]; ok && string(e.value) == r.holder() {
				w.remove(name, nil, 0)
			}
		}
		delete(r.held, name)
		w.queue = append(w.queue, delivery{to: r, ev: abi.Event{Key: name, Op: abi.OpLockLost}})
		return nil
	}
	return fmt.Errorf("lock %q is not held by any rule", name)
}

// next returns the earliest pending timer or key expiry, if any.
func (w *world) next() (int64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := int64(0), false
	consider := func(t int64) {
		if !ok || t < at {
			at, ok = t, true
		}
	}
	for _, r := range w.rules {
		for _, t := range r.timers {
			consider(t.deadline)
		}
	}
	for _, e := range w.store {
		if e.expires > 0 {
			consider(e.expires)
		}
	}
	for _, lw := range w.waiters {
		consider(lw.deadline)
	}
	return at, ok
}

// due expires the keys and fires the timers due at the current time, in
// a fixed order (keys sorted; rules in load order, timers by deadline then
// name). Under mu.
func (w *world) due() {
	var expired []string
	for k, e := range w.store {
		if e.expires > 0 && e.expires <= w.now {
			expired = append(expired, k)
		}
	}
	sort.Strings(expired)
	for _, k := range expired {
		w.remove(k, nil, 0)
	}
	w.wakeWaiters() // waits past their deadline
	for _, r := range w.rules {
		var fire []*timer
		for _, t := range r.timers {
			if t.deadline <= w.now {
				fire = append(fire, t)
			}
		}
		sort.Slice(fire, func(i, j int) bool {
			if fire[i].deadline != fire[j].deadline {
				return fire[i].deadline < fire[j].deadline
			}
			return fire[i].name < fire[j].name
		})
		for _, t := range fire {
			w.queue = append(w.queue, delivery{to: r, ev: abi.Event{Key: t.name, Op: abi.OpTimer, Value: t.payload, Deadline: t.deadline}})
			if t.every > 0 {
				t.deadline += t.every
			} else {
				delete(r.timers, t.name)
			}
		}
	}
}

// drain delivers queued events, and what they cause, until none is left.
// A rule parked in a lock wait gets its next events once it is resumed
// and has returned; the other rules' events go on meanwhile.
func (w *world) drain(ctx context.Context) {
	for {
		w.mu.Lock()
		w.due()
		if len(w.resumed) > 0 {
			b := w.resumed[0]
			w.resumed = w.resumed[1:]
			w.mu.Unlock()
			w.await(b)
			continue
		}
		i := slices.IndexFunc(w.queue, func(d delivery) bool { return d.to.running == nil })
		if i < 0 {
			w.mu.Unlock()
			return
		}
		d := w.queue[i]
		w.queue = slices.Delete(w.queue, i, i+1)
		d.to.hop = d.hop
		w.mu.Unlock()
		w.handle(ctx, d)
	}
}

// advance moves the virtual clock by d, stopping at every timer and expiry
// on the way to deliver what it causes.
func (w *world) advance(ctx context.Context, d time.Duration) {
	w.mu.Lock()
	target := w.now + d.Milliseconds()
	w.mu.Unlock()
	for {
		at, ok := w.next()
		if !ok || at > target {
			break
		}
		w.mu.Lock()
		w.now = max(w.now, at)
		w.mu.Unlock()
		w.drain(ctx)
	}
	w.mu.Lock()
	w.now = target
	w.mu.Unlock()
	w.drain(ctx)
}

// --- abi.Host, for one rule ---

func (b *binding) fail(s abi.Status, format string, args ...any) error {
	return abi.Errorf(s, format, args...)
}

// access checks the store is up and the rule may use key as verb allows.
func (b *binding) access(patterns []string, verb, key string) error {
	if key == "" {
		return b.fail(abi.StatusInvalid, "%s: empty key", verb)
	}
	if b.w.down {
		return b.fail(abi.StatusUnavailable, "%s %s: store not connected", verb, key)
	}
	if !host.Allowed(patterns, key) {
		return b.fail(abi.StatusDenied, "%s %s: not allowed by the rule's permissions", verb, key)
	}
	return nil
}

// fenced checks a write fenced with the lock fence (none when empty): the
// rule must believe it holds the lock (LOCK_LOST otherwise, as the host
// answers without asking the store), and its token must be the newest the
// store issued for the lock (FENCED otherwise, as the store answers).
func (b *binding) fenced(verb, key, fence string) error {
	if fence == "" {
		return nil
	}
	l, ok := b.held[fence]
	if !ok {
		return b.fail(abi.StatusLockLost, "%s %s: lock %q is not held", verb, key, fence)
	}
	if l.n < b.w.newest[fence] {
		return b.fail(abi.StatusFenced, "%s %s: the store refused the fencing token of lock %q: a newer one was issued", verb, key, fence)
	}
	return nil
}

func (b *binding) Get(_ context.Context, key string) (abi.Value, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.access(b.cfg.Read, "get", key); err != nil {
		return abi.Value{}, err
	}
	e, ok := b.w.store[key]
	if !ok {
		return abi.Value{}, b.fail(abi.StatusNotFound, "get %s: not found", key)
	}
	return abi.Value{Data: append([]byte(nil), e.value...), Version: e.version}, nil
}

func (b *binding) Set(_ context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.access(b.cfg.Write, "set", key); err != nil {
		return "", err
	}
	if max := b.cfg.MaxValueBytes; len(value) > max {
		return "", b.fail(abi.StatusTooLarge, "set %s: value of %d bytes exceeds max_value %d", key, len(value), max)
	}
	if err := b.fenced("set", key, opts.Fence); err != nil {
		return "", err
	}
	if e, ok := b.w.store[key]; ok && (opts.Cond == abi.CondNX || opts.Cond == abi.CondNEX && string(e.value) != string(value)) {
		return e.version, b.fail(abi.StatusNotApplied, "set %s: condition not met", key)
	}
	value = append([]byte(nil), value...)
	b.w.writes = append(b.w.writes, "SET "+key+" "+string(value))
	if b.w.onWrite != nil {
		b.w.onWrite(b.name, "SET", key, value)
	}
	return b.w.put(key, value, opts.TTL, b, b.hop+1), nil
}

func (b *binding) del(verb, key string, match []byte, fence string) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.access(b.cfg.Write, verb, key); err != nil {
		return err
	}
	if err := b.fenced(verb, key, fence); err != nil {
		return err
	}
	e, ok := b.w.store[key]
	if !ok {
		return b.fail(abi.StatusNotFound, "%s %s: not found", verb, key)
	}
	if match != nil && string(e.value) != string(match) {
		return b.fail(abi.StatusNotApplied, "%s %s: value differs", verb, key)
	}
	b.w.writes = append(b.w.writes, "DEL "+key)
	if b.w.onWrite != nil {
		b.w.onWrite(b.name, "DEL", key, nil)
	}
	b.w.remove(key, b, b.hop+1)
	return nil
}

func (b *binding) Del(_ context.Context, key string, opts abi.DelOptions) error {
	return b.del("del", key, nil, opts.Fence)
}

func (b *binding) VDel(_ context.Context, key string, value []byte, opts abi.DelOptions) error {
	if value == nil {
		value = []byte{}
	}
	return b.del("vdel", key, value, opts.Fence)
}

func (b *binding) Watch(_ context.Context, key string, opts abi.WatchOptions) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.access(b.cfg.Watch, "watch", key); err != nil {
		return err
	}
	b.watches[key] = opts
	return nil
}

func (b *binding) Unwatch(_ context.Context, key string) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if _, ok := b.watches[key]; !ok {
		return b.fail(abi.StatusNotFound, "unwatch %s: not watched", key)
	}
	delete(b.watches, key)
	return nil
}

func (b *binding) Lock(_ context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if err := b.access(b.cfg.Lock, "lock", name); err != nil {
		return "", err
	}
	if !host.Allowed(b.cfg.Write, name) {
		return "", b.fail(abi.StatusDenied, "lock %s: the lock's key is not writable by the rule", name)
	}
	if ttl <= 0 {
		return "", b.fail(abi.StatusInvalid, "lock %s: ttl must be positive", name)
	}
	// As the host does, a lock the rule believes it holds is answered
	// with its token without asking the store (even after a fence step
	// gave it to another host: the rule's fenced writes find out).
	if l, ok := b.held[name]; ok {
		return l.token, nil
	}
	if opts.Wait < 0 {
		return "", b.fail(abi.StatusInvalid, "lock %s: wait must not be negative", name)
	}
	if token, ok := b.w.tryLock(b, name); ok {
		return token, nil
	}
	// A wait parks the handler (not the rule's start, which no drain
	// waits on).
	if opts.Wait == 0 || b.running == nil {
		return "", b.fail(abi.StatusBusy, "lock %s: held by another holder", name)
	}
	return b.w.waitLock(b, name, ttl, opts.Wait)
}

func (b *binding) Unlock(_ context.Context, name string) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.w.down {
		return b.fail(abi.StatusUnavailable, "unlock %s: store not connected", name)
	}
	if _, ok := b.held[name]; !ok || b.w.locks[name] != b {
		delete(b.held, name)
		return b.fail(abi.StatusNotFound, "unlock %s: not held", name)
	}
	delete(b.held, name)
	delete(b.w.locks, name)
	if e, ok := b.w.store[name]; ok && string(e.value) == b.holder() {
		b.w.remove(name, nil, b.hop+1) // VDEL of the holder's value
	}
	return nil
}

func (b *binding) Log(level int32, msg string) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	b.w.logf("%s: %s: %s", b.name, levelName(level), msg)
}

func levelName(l int32) string {
	switch {
	case l >= abi.LevelError:
		return "error"
	case l >= abi.LevelWarn:
		return "warn"
	case l >= abi.LevelInfo:
		return "info"
	}
	return "debug"
}

func (b *binding) Timer(_ context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.w.down {
		return b.fail(abi.StatusUnavailable, "timer %s: store not connected", name)
	}
	if name == "" || delay < 0 || opts.Every < 0 {
		return b.fail(abi.StatusInvalid, "timer %q: want a name and a delay and period that are not negative", name)
	}
	if _, armed := b.timers[name]; !armed && len(b.timers) >= b.cfg.MaxTimers {
		return b.fail(abi.StatusQuota, "timer %s: max_timers %d reached", name, b.cfg.MaxTimers)
	}
	b.timers[name] = &timer{name: name, deadline: b.w.now + delay.Milliseconds(), every: opts.Every.Milliseconds(), payload: append([]byte(nil), opts.Payload...)}
	return nil
}

func (b *binding) Cancel(_ context.Context, name string) error {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	if b.w.down {
		return b.fail(abi.StatusUnavailable, "cancel %s: store not connected", name)
	}
	if _, ok := b.timers[name]; !ok {
		return b.fail(abi.StatusNotFound, "cancel %s: no such timer", name)
	}
	delete(b.timers, name)
	return nil
}

func (b *binding) Now() int64 {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	return b.w.now
}

// timerNames returns the names of the rule's pending timers, sorted.
func (b *binding) timerNames() []string {
	out := make([]string, 0, len(b.timers))
	for n := range b.timers {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

var errUnknownRule = errors.New("no such rule")

// rule returns the binding of the rule named name (file name).
func (w *world) rule(name string) (*binding, error) {
	for _, r := range w.rules {
		if r.name == name {
			return r, nil
		}
	}
	return nil, fmt.Errorf("%w %q", errUnknownRule, name)
}
