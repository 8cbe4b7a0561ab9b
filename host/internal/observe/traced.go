package observe

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Traced wraps a rule's host (its binding, or a Recorded) to tell a
// CallTracer of each call made during a handler. A shadow version's calls
// are not told (they never reach the store), nor those outside a handler
// (there is no run).
type Traced struct {
	Next     abi.Host    // where the calls go
	T        CallTracer  // told each call made during a handler
	Name     string      // the rule's file name, as in the logs
	Shadow   func() bool // whether the rule's version runs as a canary's shadow
	Handling func() bool // whether the call is made while a handler runs
}

var _ abi.Host = (*Traced)(nil)

func (h *Traced) done(verb, key string, at time.Time, err error) {
	if h.Shadow() || !h.Handling() {
		return // a shadow's calls never reach the store; outside a handler there is no run
	}
	h.T.Called(h.Name, TracedCall{Verb: verb, Key: key, Status: abi.StatusOf(err), At: at, Took: time.Since(at)})
}

// call makes the call f, of verb on key, and tells the tracer.
func (h *Traced) call(verb, key string, f func() error) error {
	at := time.Now()
	err := f()
	h.done(verb, key, at, err)
	return err
}

func (h *Traced) Get(ctx context.Context, key string) (abi.Value, error) {
	at := time.Now()
	v, err := h.Next.Get(ctx, key)
	h.done("get", key, at, err)
	return v, err
}

func (h *Traced) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	at := time.Now()
	version, err := h.Next.Set(ctx, key, value, opts)
	h.done("set", key, at, err)
	return version, err
}

func (h *Traced) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	return h.call("del", key, func() error { return h.Next.Del(ctx, key, opts) })
}

func (h *Traced) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	return h.call("vdel", key, func() error { return h.Next.VDel(ctx, key, value, opts) })
}

func (h *Traced) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	return h.call("watch", key, func() error { return h.Next.Watch(ctx, key, opts) })
}

func (h *Traced) Unwatch(ctx context.Context, key string) error {
	return h.call("unwatch", key, func() error { return h.Next.Unwatch(ctx, key) })
}

func (h *Traced) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	at := time.Now()
	keys, err := h.Next.Keys(ctx, pattern, opts)
	h.done("keys", pattern, at, err)
	return keys, err
}

func (h *Traced) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	return h.call("watch_pattern", pattern, func() error { return h.Next.WatchPattern(ctx, pattern, opts) })
}

func (h *Traced) UnwatchPattern(ctx context.Context, pattern string) error {
	return h.call("unwatch_pattern", pattern, func() error { return h.Next.UnwatchPattern(ctx, pattern) })
}

func (h *Traced) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	at := time.Now()
	token, err := h.Next.Lock(ctx, name, ttl, opts)
	h.done("lock", name, at, err)
	return token, err
}

func (h *Traced) Unlock(ctx context.Context, name string) error {
	return h.call("unlock", name, func() error { return h.Next.Unlock(ctx, name) })
}

func (h *Traced) Log(level int32, msg string) { h.Next.Log(level, msg) }

func (h *Traced) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	return h.call("timer", name, func() error { return h.Next.Timer(ctx, name, delay, opts) })
}

func (h *Traced) Cancel(ctx context.Context, name string) error {
	return h.call("cancel", name, func() error { return h.Next.Cancel(ctx, name) })
}

func (h *Traced) Now() int64 { return h.Next.Now() }
