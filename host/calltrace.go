package host

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// CallTracer is what a Tracer may also be, to be told each host call a
// rule makes while it handles an event (its verb, key, status and
// duration, never a value): for a trace that shows a run's calls (the
// OTLP export). The rules' hosts are wrapped for it only when TracesCalls
// says so as the version starts, so a tracer that does not want the calls
// costs nothing per call.
type CallTracer interface {
	TracesCalls() bool
	// Called is told a call of rule during a handler; on the rule's
	// goroutine, so it must be fast and must not call the Host.
	Called(rule string, c TracedCall)
}

// TracedCall is one host call a rule made during a handler.
type TracedCall struct {
	Verb   string // get, set, del, ...
	Key    string // the key, lock, timer or pattern
	Status abi.Status
	At     time.Time
	Took   time.Duration
}

// traced wraps a rule's host (its binding, or the recorder's wrap of it)
// to tell t of each call made during a handler.
type traced struct {
	b *binding
	h abi.Host
	t CallTracer
}

var _ abi.Host = traced{}

// tracedFor wraps h for s's tracer when it wants the calls.
func (s *services) tracedFor(b *binding, h abi.Host) abi.Host {
	if ct, ok := s.trace.(CallTracer); ok && ct.TracesCalls() {
		return traced{b: b, h: h, t: ct}
	}
	return h
}

func (h traced) done(verb, key string, at time.Time, err error) {
	if h.b.inShadow() || h.b.handling().Op == "" {
		return // a shadow's calls never reach the store; outside a handler there is no run
	}
	h.t.Called(h.b.r.name, TracedCall{Verb: verb, Key: key, Status: abi.StatusOf(err), At: at, Took: time.Since(at)})
}

// call makes the call f, of verb on key, and tells the tracer.
func (h traced) call(verb, key string, f func() error) error {
	at := time.Now()
	err := f()
	h.done(verb, key, at, err)
	return err
}

func (h traced) Get(ctx context.Context, key string) (abi.Value, error) {
	at := time.Now()
	v, err := h.h.Get(ctx, key)
	h.done("get", key, at, err)
	return v, err
}

func (h traced) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	at := time.Now()
	version, err := h.h.Set(ctx, key, value, opts)
	h.done("set", key, at, err)
	return version, err
}

func (h traced) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	return h.call("del", key, func() error { return h.h.Del(ctx, key, opts) })
}

func (h traced) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	return h.call("vdel", key, func() error { return h.h.VDel(ctx, key, value, opts) })
}

func (h traced) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	return h.call("watch", key, func() error { return h.h.Watch(ctx, key, opts) })
}

func (h traced) Unwatch(ctx context.Context, key string) error {
	return h.call("unwatch", key, func() error { return h.h.Unwatch(ctx, key) })
}

func (h traced) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	at := time.Now()
	keys, err := h.h.Keys(ctx, pattern, opts)
	h.done("keys", pattern, at, err)
	return keys, err
}

func (h traced) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	return h.call("watch_pattern", pattern, func() error { return h.h.WatchPattern(ctx, pattern, opts) })
}

func (h traced) UnwatchPattern(ctx context.Context, pattern string) error {
	return h.call("unwatch_pattern", pattern, func() error { return h.h.UnwatchPattern(ctx, pattern) })
}

func (h traced) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	at := time.Now()
	token, err := h.h.Lock(ctx, name, ttl, opts)
	h.done("lock", name, at, err)
	return token, err
}

func (h traced) Unlock(ctx context.Context, name string) error {
	return h.call("unlock", name, func() error { return h.h.Unlock(ctx, name) })
}

func (h traced) Log(level int32, msg string) { h.h.Log(level, msg) }

func (h traced) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	return h.call("timer", name, func() error { return h.h.Timer(ctx, name, delay, opts) })
}

func (h traced) Cancel(ctx context.Context, name string) error {
	return h.call("cancel", name, func() error { return h.h.Cancel(ctx, name) })
}

func (h traced) Now() int64 { return h.h.Now() }
