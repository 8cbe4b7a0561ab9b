package observe

import (
	"bytes"
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Recorded wraps a rule's host for a Recorder: each call goes to Next,
// then to Rec with its reply. A shadow version's calls are not recorded
// (they never reach the store).
type Recorded struct {
	Next   abi.Host     // where the calls go
	Rec    Recorder     // told each call with its reply
	Name   string       // the rule's file name, as in the logs
	Shadow func() bool  // whether the rule's version runs as a canary's shadow
	NowMs  func() int64 // the host's clock (Unix ms): the time of each call but now
}

var _ abi.Host = (*Recorded)(nil)

func (h *Recorded) done(c Call, err error) {
	if h.Shadow() {
		return
	}
	c.Status = abi.StatusOf(err)
	if err != nil {
		c.Err = err.Error()
	}
	at := c.Now
	if c.Verb != "now" {
		at = h.NowMs()
	}
	h.Rec.RecordCall(h.Name, at, c)
}

func (h *Recorded) Get(ctx context.Context, key string) (abi.Value, error) {
	v, err := h.Next.Get(ctx, key)
	h.done(Call{Verb: "get", Key: key, Result: v.Data, Found: err == nil, Version: v.Version}, err)
	return v, err
}

func (h *Recorded) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	version, err := h.Next.Set(ctx, key, value, opts)
	h.done(Call{Verb: "set", Key: key, Value: bytes.Clone(value), Cond: opts.Cond, TTL: opts.TTL, Fence: opts.Fence, Version: version}, err)
	return version, err
}

func (h *Recorded) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	err := h.Next.Del(ctx, key, opts)
	h.done(Call{Verb: "del", Key: key, Fence: opts.Fence}, err)
	return err
}

func (h *Recorded) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	err := h.Next.VDel(ctx, key, value, opts)
	h.done(Call{Verb: "vdel", Key: key, Value: bytes.Clone(value), Fence: opts.Fence}, err)
	return err
}

func (h *Recorded) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	err := h.Next.Watch(ctx, key, opts)
	h.done(Call{Verb: "watch", Key: key, Self: opts.Self}, err)
	return err
}

func (h *Recorded) Unwatch(ctx context.Context, key string) error {
	err := h.Next.Unwatch(ctx, key)
	h.done(Call{Verb: "unwatch", Key: key}, err)
	return err
}

func (h *Recorded) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	keys, err := h.Next.Keys(ctx, pattern, opts)
	h.done(Call{Verb: "keys", Key: pattern, Limit: opts.Limit, Keys: keys}, err)
	return keys, err
}

func (h *Recorded) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	err := h.Next.WatchPattern(ctx, pattern, opts)
	h.done(Call{Verb: "watch_pattern", Key: pattern, Self: opts.Self}, err)
	return err
}

func (h *Recorded) UnwatchPattern(ctx context.Context, pattern string) error {
	err := h.Next.UnwatchPattern(ctx, pattern)
	h.done(Call{Verb: "unwatch_pattern", Key: pattern}, err)
	return err
}

func (h *Recorded) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	token, err := h.Next.Lock(ctx, name, ttl, opts)
	h.done(Call{Verb: "lock", Key: name, TTL: ttl, Wait: opts.Wait, Version: token}, err)
	return token, err
}

func (h *Recorded) Unlock(ctx context.Context, name string) error {
	err := h.Next.Unlock(ctx, name)
	h.done(Call{Verb: "unlock", Key: name}, err)
	return err
}

func (h *Recorded) Log(level int32, msg string) { h.Next.Log(level, msg) }

func (h *Recorded) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	err := h.Next.Timer(ctx, name, delay, opts)
	h.done(Call{Verb: "timer", Key: name, TTL: delay, Every: opts.Every, Value: bytes.Clone(opts.Payload)}, err)
	return err
}

func (h *Recorded) Cancel(ctx context.Context, name string) error {
	err := h.Next.Cancel(ctx, name)
	h.done(Call{Verb: "cancel", Key: name}, err)
	return err
}

func (h *Recorded) Now() int64 {
	ms := h.Next.Now()
	h.done(Call{Verb: "now", Now: ms}, nil)
	return ms
}
