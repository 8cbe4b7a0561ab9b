// Package abitest provides an in-memory abi.Host for runtime tests and
// benchmarks: the state store's own semantics (package store, in memory:
// versions, NX/NEX, VDEL, fences) behind the store verbs, locks with
// tokens, and no broker, so a runtime can be tested verb by verb (Store).
//
// Beyond the store, a Host is a test double: it counts the calls of each
// verb (Calls), records the arguments of the last one (LastCall), fails a
// verb on demand (Fail), and can be emptied between cases (Reset) while a
// runtime keeps using it.
package abitest

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Host is an in-memory abi.Host. The zero value is not usable; call New.
type Host struct {
	mu      sync.Mutex
	st      *Store // reset in place: Store returns the same one
	watches map[string]abi.WatchOptions
	// patterns are the patterns watched (WatchPattern).
	patterns map[string]abi.WatchOptions
	logs     []LogLine
	calls    map[string]int
	last     map[string]Call
	fail     map[string]error
	timers   map[string]Timer
	now      int64 // Unix ms; 0: the real clock
	// Deny, when set, refuses keys it returns true for with StatusDenied.
	// Set it before the runtime calls the Host; Reset clears it.
	Deny func(verb, key string) bool
	// MaxWatchedKeys bounds the keys a WatchPattern may cover
	// (DefaultMaxWatchedKeys when zero). Reset keeps it.
	MaxWatchedKeys int
}

// Call is what one call of a verb received. Only the fields of that verb's
// arguments are set.
type Call struct {
	Key         string           // the key, or the lock name (all verbs but log)
	Value       []byte           // set, vdel: the value (a copy; nil stays nil)
	Set         abi.SetOptions   // set
	Del         abi.DelOptions   // del, vdel
	Watch       abi.WatchOptions // watch, watch_pattern (Key: the pattern)
	Keys        abi.KeysOptions  // keys (Key: the pattern)
	TTL         time.Duration    // lock
	Lock        abi.LockOptions  // lock
	Delay       time.Duration    // timer
	Timer       abi.TimerOptions // timer (Payload a copy)
	Level       int32            // log
	Msg         string           // log: the message
	HasDeadline bool             // the call's context had a deadline (never for log)
}

// LogLine is one call of Log.
type LogLine struct {
	Level int32
	Msg   string
}

// New returns an empty Host.
func New() *Host {
	h := &Host{st: NewStore()}
	h.reset()
	return h
}

// Store returns h's store, to call its verbs without h's bookkeeping (a
// benchmark's host). Reset empties it.
func (h *Host) Store() *Store { return h.st }

var _ abi.Host = (*Host)(nil)

// Reset returns h to the state New returns: no keys, watches, locks, timers,
// log lines, counted or recorded calls, injected failures or Deny, the real
// clock, and versions counting from 1 again. A runtime holding h keeps using
// it.
func (h *Host) Reset() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reset()
}

func (h *Host) reset() {
	h.st.mu.Lock()
	h.st.reset()
	h.st.mu.Unlock()
	h.watches, h.patterns, h.logs = map[string]abi.WatchOptions{}, map[string]abi.WatchOptions{}, nil
	h.calls, h.last, h.fail, h.Deny = map[string]int{}, map[string]Call{}, map[string]error{}, nil
	h.timers, h.now = map[string]Timer{}, 0
}

// Fail makes every later call of verb return err before the store is
// touched (the call is still counted and recorded); a nil err ends that.
// Log cannot fail: Fail(abi.FnLog, err) has no effect on it.
func (h *Host) Fail(verb string, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err == nil {
		delete(h.fail, verb)
		return
	}
	h.fail[verb] = err
}

// Failure is an error a Host may return from a verb, and the status a
// runtime must report for it to the rule.
type Failure struct {
	Name   string // "injected <STATUS>" or "plain error <STATUS>"
	Err    error
	Status abi.Status
}

// Failures returns one error of each kind a Host may return from verb, to
// inject with Fail: an *abi.Error of every status but OK and
// BUFFER_TOO_SMALL (which only a runtime produces), with the message
// "injected <STATUS> for <verb>"; then context.DeadlineExceeded, reported
// as TIMEOUT, and a plain error, reported as INTERNAL.
func Failures(verb string) []Failure {
	var out []Failure
	for _, st := range abi.Statuses() {
		if st == abi.StatusOK || st == abi.StatusBufferTooSmall {
			continue
		}
		out = append(out, Failure{Name: "injected " + st.String(), Err: abi.Errorf(st, "injected %s for %s", st, verb), Status: st})
	}
	return append(out,
		Failure{Name: "plain error TIMEOUT", Err: context.DeadlineExceeded, Status: abi.StatusTimeout},
		Failure{Name: "plain error INTERNAL", Err: errors.New("boom: not an *abi.Error"), Status: abi.StatusInternal})
}

// LastCall returns the arguments of the last call of verb, and whether verb
// was called since New or Reset.
func (h *Host) LastCall(verb string) (Call, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	c, ok := h.last[verb]
	return c, ok
}

// begin counts and records a call of verb (c holds its arguments), then
// refuses it with an injected failure, an empty key or Deny.
func (h *Host) begin(ctx context.Context, verb string, c Call) error {
	h.calls[verb]++
	_, c.HasDeadline = ctx.Deadline()
	c.Value = bytes.Clone(c.Value)
	h.last[verb] = c
	if err := h.fail[verb]; err != nil {
		return err
	}
	if c.Key == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty key", verb)
	}
	if h.Deny != nil && h.Deny(verb, c.Key) {
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted", verb, c.Key)
	}
	return nil
}

// Get implements abi.Host.
func (h *Host) Get(ctx context.Context, key string) (abi.Value, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnGet, Call{Key: key}); err != nil {
		return abi.Value{}, err
	}
	return h.st.Get(ctx, key)
}

// Set implements abi.Host.
func (h *Host) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnSet, Call{Key: key, Value: value, Set: opts}); err != nil {
		return "", err
	}
	return h.st.Set(ctx, key, value, opts)
}

// Del implements abi.Host.
func (h *Host) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnDel, Call{Key: key, Del: opts}); err != nil {
		return err
	}
	return h.st.Del(ctx, key, opts)
}

// VDel implements abi.Host.
func (h *Host) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnVDel, Call{Key: key, Value: value, Del: opts}); err != nil {
		return err
	}
	return h.st.VDel(ctx, key, value, opts)
}

// Watch implements abi.Host.
func (h *Host) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnWatch, Call{Key: key, Watch: opts}); err != nil {
		return err
	}
	h.watches[key] = opts
	return nil
}

// Unwatch implements abi.Host.
func (h *Host) Unwatch(ctx context.Context, key string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnUnwatch, Call{Key: key}); err != nil {
		return err
	}
	if _, ok := h.watches[key]; !ok {
		return abi.Errorf(abi.StatusNotFound, "unwatch %q: not watched", key)
	}
	delete(h.watches, key)
	return nil
}

// Lock implements abi.Host (see Store.Lock): a lock is free unless this
// Host holds it, or a value is stored under its name by someone else
// (Set, Put), which makes it BUSY.
func (h *Host) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnLock, Call{Key: name, TTL: ttl, Lock: opts}); err != nil {
		return "", err
	}
	return h.st.Lock(ctx, name, ttl, opts)
}

// Unlock implements abi.Host.
func (h *Host) Unlock(ctx context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnUnlock, Call{Key: name}); err != nil {
		return err
	}
	return h.st.Unlock(ctx, name)
}

// LoseLock drops a held lock as if its lease lapsed.
func (h *Host) LoseLock(name string) { h.st.LoseLock(name) }

// Log implements abi.Host.
func (h *Host) Log(level int32, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[abi.FnLog]++
	h.last[abi.FnLog] = Call{Level: level, Msg: msg}
	h.logs = append(h.logs, LogLine{Level: level, Msg: msg})
}

// Timer is a timer armed on a Host: when it is due, its period and payload.
type Timer struct {
	Deadline int64 // Unix milliseconds on the Host's clock (Now)
	Every    time.Duration
	Payload  []byte
}

// Timer implements abi.Host: it records the timer (see Timers); nothing
// fires by itself, a test delivers the TIMER event it wants.
func (h *Host) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	opts.Payload = bytes.Clone(opts.Payload)
	if err := h.begin(ctx, abi.FnTimer, Call{Key: name, Delay: delay, Timer: opts}); err != nil {
		return err
	}
	if delay < 0 || opts.Every < 0 {
		return abi.Errorf(abi.StatusInvalid, "timer %q: negative delay or period", name)
	}
	h.timers[name] = Timer{Deadline: h.nowLocked() + delay.Milliseconds(), Every: opts.Every, Payload: opts.Payload}
	return nil
}

// Cancel implements abi.Host.
func (h *Host) Cancel(ctx context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnCancel, Call{Key: name}); err != nil {
		return err
	}
	if _, ok := h.timers[name]; !ok {
		return abi.Errorf(abi.StatusNotFound, "cancel %q: no such timer", name)
	}
	delete(h.timers, name)
	return nil
}

// Now implements abi.Host: the time set with SetNow, else the real clock.
// It is counted (Calls) and recorded with an empty Call.
func (h *Host) Now() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls[abi.FnNow]++
	h.last[abi.FnNow] = Call{}
	return h.nowLocked()
}

func (h *Host) nowLocked() int64 {
	if h.now != 0 {
		return h.now
	}
	return time.Now().UnixMilli()
}

// SetNow fixes the Host's clock at ms (Unix milliseconds); 0 returns to the
// real clock.
func (h *Host) SetNow(ms int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.now = ms
}

// Timers returns the armed timers by name.
func (h *Host) Timers() map[string]Timer {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]Timer, len(h.timers))
	for k, v := range h.timers {
		v.Payload = bytes.Clone(v.Payload)
		out[k] = v
	}
	return out
}

// Value returns the stored value of key.
func (h *Host) Value(key string) ([]byte, bool) { return h.st.Value(key) }

// Put stores key directly, as another writer would (see Store.Put).
func (h *Host) Put(key string, value []byte) string { return h.st.Put(key, value) }

// Watches returns the watched keys and their options.
func (h *Host) Watches() map[string]abi.WatchOptions {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]abi.WatchOptions, len(h.watches))
	for k, v := range h.watches {
		out[k] = v
	}
	return out
}

// Logs returns the log lines so far.
func (h *Host) Logs() []LogLine {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]LogLine(nil), h.logs...)
}

// Calls returns how many times verb was called since New or Reset,
// including calls that failed.
func (h *Host) Calls(verb string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[verb]
}
