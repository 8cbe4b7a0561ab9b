package host

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Recorder is told what the host's rules see, for a trace that replays
// them (`ssrun dev --record`, package testrun): every event a rule is about
// to handle, every host call a rule makes with the reply it got, and the
// store connection going down and up. Each call is made on the goroutine
// that saw it (a rule's worker, the dispatcher), in the order that
// goroutine saw it; calls of one rule never overlap. It must be fast and
// must not block or call the Host. atMs is the host's clock (hostClock, the
// clock rules read with now()), in Unix ms. A nil Config.Recorder costs
// nothing: rules get the binding itself, unwrapped.
//
// Not recorded: the calls of a canary's shadow (they never reach the
// store) and log lines. In a dry run the rules' calls are recorded with the
// replies of the staged overlay they got.
type Recorder interface {
	// RecordEvent reports ev about to be handled by rule (the file name,
	// as in the logs): a notification with its value and version, a
	// timer's firing with its deadline, LOCK_LOST.
	RecordEvent(rule string, atMs int64, ev abi.Event)
	// RecordCall reports one host call of rule with its reply, once the
	// reply is known.
	RecordCall(rule string, atMs int64, c Call)
	// RecordConnection reports the store connection coming up or going
	// down.
	RecordConnection(atMs int64, up bool)
}

// Call is one host call of a rule and its reply, for a Recorder.
type Call struct {
	Verb  string // get, set, del, vdel, watch, unwatch, lock, unlock, timer, cancel, now
	Key   string // the key, lock or timer name; empty for now
	Value []byte // set's value, vdel's expected value, timer's payload
	Cond  abi.Condition
	TTL   time.Duration // set's ttl, lock's lease
	Wait  time.Duration // lock
	Every time.Duration // timer's period; Delay is in TTL
	Fence string        // set, del, vdel
	Self  bool          // watch

	// The reply: its status, with the error's message when not OK.
	Status abi.Status
	Err    string
	// Result is get's value; Version get's or set's version, lock's
	// fencing token; Now now's reading (Unix ms).
	Result  []byte
	Found   bool
	Version string
	Now     int64
}

// recorded wraps b for the rules of a host with a Recorder: each call goes
// to b, then to the recorder with its reply. A shadow version's calls are
// not recorded (they never reach the store).
type recorded struct {
	b   *binding
	rec Recorder
}

var _ abi.Host = recorded{}

// hostFor is what the version of b is started with: b itself, or b wrapped
// for the recorder.
func (s *services) hostFor(b *binding) abi.Host {
	if s.rec == nil {
		return b
	}
	return recorded{b: b, rec: s.rec}
}

// recordEvent reports ev, about to be handled by rule r, to the recorder.
func (r *rule) recordEvent(ev abi.Event) {
	if r.svc.rec != nil {
		r.svc.rec.RecordEvent(r.name, r.svc.timers.clock.nowMs(), ev)
	}
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
		at = h.b.r.svc.timers.clock.nowMs()
	}
	h.rec.RecordCall(h.b.r.name, at, c)
}

func (h recorded) Get(ctx context.Context, key string) (abi.Value, error) {
	v, err := h.b.Get(ctx, key)
	h.done(Call{Verb: "get", Key: key, Result: v.Data, Found: err == nil, Version: v.Version}, err)
	return v, err
}

func (h recorded) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	version, err := h.b.Set(ctx, key, value, opts)
	h.done(Call{Verb: "set", Key: key, Value: value, Cond: opts.Cond, TTL: opts.TTL, Fence: opts.Fence, Version: version}, err)
	return version, err
}

func (h recorded) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	err := h.b.Del(ctx, key, opts)
	h.done(Call{Verb: "del", Key: key, Fence: opts.Fence}, err)
	return err
}

func (h recorded) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	err := h.b.VDel(ctx, key, value, opts)
	h.done(Call{Verb: "vdel", Key: key, Value: value, Fence: opts.Fence}, err)
	return err
}

func (h recorded) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	err := h.b.Watch(ctx, key, opts)
	h.done(Call{Verb: "watch", Key: key, Self: opts.Self}, err)
	return err
}

func (h recorded) Unwatch(ctx context.Context, key string) error {
	err := h.b.Unwatch(ctx, key)
	h.done(Call{Verb: "unwatch", Key: key}, err)
	return err
}

func (h recorded) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	token, err := h.b.Lock(ctx, name, ttl, opts)
	h.done(Call{Verb: "lock", Key: name, TTL: ttl, Wait: opts.Wait, Version: token}, err)
	return token, err
}

func (h recorded) Unlock(ctx context.Context, name string) error {
	err := h.b.Unlock(ctx, name)
	h.done(Call{Verb: "unlock", Key: name}, err)
	return err
}

func (h recorded) Log(level int32, msg string) { h.b.Log(level, msg) }

func (h recorded) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	err := h.b.Timer(ctx, name, delay, opts)
	h.done(Call{Verb: "timer", Key: name, TTL: delay, Every: opts.Every, Value: opts.Payload}, err)
	return err
}

func (h recorded) Cancel(ctx context.Context, name string) error {
	err := h.b.Cancel(ctx, name)
	h.done(Call{Verb: "cancel", Key: name}, err)
	return err
}

func (h recorded) Now() int64 {
	ms := h.b.Now()
	h.done(Call{Verb: "now", Now: ms}, nil)
	return ms
}

// recordConnection reports the connection going up or down to the
// recorder.
func (h *Host) recordConnection(up bool) {
	if h.rec != nil {
		h.rec.RecordConnection(h.timers.clock.nowMs(), up)
	}
}
