package host

import (
	"bytes"
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// recorded wraps b for the rules of a host with a Recorder: each call goes
// to b, then to the recorder with its reply. A shadow version's calls are
// not recorded (they never reach the store).
type recorded struct {
	b    *binding
	next abi.Host
	rec  Recorder
}

var _ abi.Host = recorded{}

// hostFor is what the version of b is started with: its chain
// (binding.chain), wrapped for the recorder and for a tracer that wants
// the calls (calltrace.go), handed to the runtime as a handed.
func (s *services) hostFor(b *binding) abi.Host {
	h := b.chain()
	if s.rec != nil {
		h = recorded{b: b, next: h, rec: s.rec}
	}
	return handed{Host: s.tracedFor(b, h), b: b}
}

// handed is the abi.Host a runtime is given for a version of a rule: its
// chain, and the binding it ends in (RuleOf, HostOf).
type handed struct {
	abi.Host
	b *binding
}

// RuleOf returns the file name of the rule h serves (as in the logs and a
// Recorder's calls), when h is a host the Host gave a rule; a runtime's
// lua.Config.Rand uses it to give each rule its own generator.
func RuleOf(h abi.Host) (string, bool) {
	if hd, ok := h.(handed); ok {
		return hd.b.r.name, true
	}
	return "", false
}

func (h recorded) done(c Call, err error) {
	if h.b.inShadow() {
		return
	}
	c.Status = abi.StatusOf(err)
	if err != nil {
		c.Err = err.Error()
	}
	at := c.Now
	if c.Verb != "now" {
		at = h.b.r.svc.timers.Clock.NowMs()
	}
	h.rec.RecordCall(h.b.r.name, at, c)
}

func (h recorded) Get(ctx context.Context, key string) (abi.Value, error) {
	v, err := h.next.Get(ctx, key)
	h.done(Call{Verb: "get", Key: key, Result: v.Data, Found: err == nil, Version: v.Version}, err)
	return v, err
}

func (h recorded) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	version, err := h.next.Set(ctx, key, value, opts)
	h.done(Call{Verb: "set", Key: key, Value: bytes.Clone(value), Cond: opts.Cond, TTL: opts.TTL, Fence: opts.Fence, Version: version}, err)
	return version, err
}

func (h recorded) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	err := h.next.Del(ctx, key, opts)
	h.done(Call{Verb: "del", Key: key, Fence: opts.Fence}, err)
	return err
}

func (h recorded) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	err := h.next.VDel(ctx, key, value, opts)
	h.done(Call{Verb: "vdel", Key: key, Value: bytes.Clone(value), Fence: opts.Fence}, err)
	return err
}

func (h recorded) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	err := h.next.Watch(ctx, key, opts)
	h.done(Call{Verb: "watch", Key: key, Self: opts.Self}, err)
	return err
}

func (h recorded) Unwatch(ctx context.Context, key string) error {
	err := h.next.Unwatch(ctx, key)
	h.done(Call{Verb: "unwatch", Key: key}, err)
	return err
}

func (h recorded) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	token, err := h.next.Lock(ctx, name, ttl, opts)
	h.done(Call{Verb: "lock", Key: name, TTL: ttl, Wait: opts.Wait, Version: token}, err)
	return token, err
}

func (h recorded) Unlock(ctx context.Context, name string) error {
	err := h.next.Unlock(ctx, name)
	h.done(Call{Verb: "unlock", Key: name}, err)
	return err
}

func (h recorded) Log(level int32, msg string) { h.next.Log(level, msg) }

func (h recorded) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	err := h.next.Timer(ctx, name, delay, opts)
	h.done(Call{Verb: "timer", Key: name, TTL: delay, Every: opts.Every, Value: bytes.Clone(opts.Payload)}, err)
	return err
}

func (h recorded) Cancel(ctx context.Context, name string) error {
	err := h.next.Cancel(ctx, name)
	h.done(Call{Verb: "cancel", Key: name}, err)
	return err
}

func (h recorded) Now() int64 {
	ms := h.next.Now()
	h.done(Call{Verb: "now", Now: ms}, nil)
	return ms
}

// recordConnection reports the connection going up or down to the
// recorder.
func (s *services) recordConnection(up bool) {
	if s.rec != nil {
		s.rec.RecordConnection(s.timers.Clock.NowMs(), up)
	}
}
