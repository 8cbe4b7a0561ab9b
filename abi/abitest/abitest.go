// Package abitest provides an in-memory abi.Host for runtime tests and
// benchmarks: a faithful little store (versions, NX/NEX, VDEL, locks with
// tokens, fences) without a broker, so a runtime can be tested verb by verb.
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
	"fmt"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Host is an in-memory abi.Host. The zero value is not usable; call New.
type Host struct {
	mu      sync.Mutex
	data    map[string]entry
	version int
	watches map[string]abi.WatchOptions
	locks   map[string]string // lock name -> token held by this rule
	logs    []LogLine
	calls   map[string]int
	last    map[string]Call
	fail    map[string]error
	timers  map[string]Timer
	now     int64 // Unix ms; 0: the real clock
	// Deny, when set, refuses keys it returns true for with StatusDenied.
	// Set it before the runtime calls the Host; Reset clears it.
	Deny func(verb, key string) bool
}

// Call is what one call of a verb received. Only the fields of that verb's
// arguments are set.
type Call struct {
	Key         string           // the key, or the lock name (all verbs but log)
	Value       []byte           // set, vdel: the value (a copy; nil stays nil)
	Set         abi.SetOptions   // set
	Del         abi.DelOptions   // del, vdel
	Watch       abi.WatchOptions // watch
	TTL         time.Duration    // lock
	Lock        abi.LockOptions  // lock
	Delay       time.Duration    // timer
	Timer       abi.TimerOptions // timer (Payload a copy)
	Level       int32            // log
	Msg         string           // log: the message
	HasDeadline bool             // the call's context had a deadline (never for log)
}

type entry struct {
	value   []byte
	version string
}

// LogLine is one call of Log.
type LogLine struct {
	Level int32
	Msg   string
}

// New returns an empty Host.
func New() *Host {
	h := &Host{}
	h.reset()
	return h
}

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
	h.data, h.version, h.watches, h.locks, h.logs = map[string]entry{}, 0, map[string]abi.WatchOptions{}, map[string]string{}, nil
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

// Version returns the n-th version (or lock token) a Host hands out after
// New or Reset, counting from 1.
func Version(n int) string { return fmt.Sprintf("%015d:%05d:abitest", n, 0) }

func (h *Host) nextVersion() string {
	h.version++
	return Version(h.version)
}

func (h *Host) fence(name string) error {
	if name == "" {
		return nil
	}
	if _, ok := h.locks[name]; !ok {
		return abi.Errorf(abi.StatusLockLost, "fence %q: lock not held", name)
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
	e, ok := h.data[key]
	if !ok {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: bytes.Clone(e.value), Version: e.version}, nil
}

// Set implements abi.Host.
func (h *Host) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnSet, Call{Key: key, Value: value, Set: opts}); err != nil {
		return "", err
	}
	if opts.Cond > abi.CondNEX || opts.TTL < 0 {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: bad options", key)
	}
	if err := h.fence(opts.Fence); err != nil {
		return "", err
	}
	e, exists := h.data[key]
	if exists && (opts.Cond == abi.CondNX || opts.Cond == abi.CondNEX && !bytes.Equal(e.value, value)) {
		return e.version, abi.Errorf(abi.StatusNotApplied, "set %q: not applied", key)
	}
	v := h.nextVersion()
	h.data[key] = entry{value: bytes.Clone(value), version: v}
	return v, nil
}

// Del implements abi.Host.
func (h *Host) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnDel, Call{Key: key, Del: opts}); err != nil {
		return err
	}
	if err := h.fence(opts.Fence); err != nil {
		return err
	}
	if _, ok := h.data[key]; !ok {
		return abi.Errorf(abi.StatusNotFound, "del %q: not found", key)
	}
	delete(h.data, key)
	return nil
}

// VDel implements abi.Host.
func (h *Host) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnVDel, Call{Key: key, Value: value, Del: opts}); err != nil {
		return err
	}
	if err := h.fence(opts.Fence); err != nil {
		return err
	}
	e, ok := h.data[key]
	if !ok {
		return abi.Errorf(abi.StatusNotFound, "vdel %q: not found", key)
	}
	if !bytes.Equal(e.value, value) {
		return abi.Errorf(abi.StatusNotApplied, "vdel %q: value differs", key)
	}
	delete(h.data, key)
	return nil
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

// Lock implements abi.Host. A lock is free unless this Host holds it, or a
// value is stored under its name by someone else (Set), which makes it BUSY.
func (h *Host) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnLock, Call{Key: name, TTL: ttl, Lock: opts}); err != nil {
		return "", err
	}
	if ttl <= 0 {
		return "", abi.Errorf(abi.StatusInvalid, "lock %q: ttl must be positive", name)
	}
	if tok, ok := h.locks[name]; ok {
		return tok, nil
	}
	if _, taken := h.data[name]; taken {
		return "", abi.Errorf(abi.StatusBusy, "lock %q: held by another holder", name)
	}
	tok := h.nextVersion()
	h.locks[name] = tok
	h.data[name] = entry{value: []byte("abitest"), version: tok}
	return tok, nil
}

// Unlock implements abi.Host.
func (h *Host) Unlock(ctx context.Context, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnUnlock, Call{Key: name}); err != nil {
		return err
	}
	if _, ok := h.locks[name]; !ok {
		return abi.Errorf(abi.StatusNotFound, "unlock %q: not held", name)
	}
	delete(h.locks, name)
	delete(h.data, name)
	return nil
}

// LoseLock drops a held lock as if its lease lapsed.
func (h *Host) LoseLock(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.locks, name)
}

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
func (h *Host) Value(key string) ([]byte, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.data[key]
	return bytes.Clone(e.value), ok
}

// Put stores key directly, as another writer would.
func (h *Host) Put(key string, value []byte) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	v := h.nextVersion()
	h.data[key] = entry{value: bytes.Clone(value), version: v}
	return v
}

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
