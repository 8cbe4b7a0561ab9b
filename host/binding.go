package host

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// binding is the abi.Host one version (in) of a rule (r) calls. It checks
// each call against the rule's permissions and limits, reads the store
// itself, and asks the rule for everything else: writes, watches, locks
// and logs.
type binding struct {
	r      *rule
	in     *instance
	client Store
	// shadow is set for a version started as a canary's shadow (see
	// canary.go): until it goes live, its writes are staged in the
	// canary's staging and its timers are not armed.
	shadow *canary
	// own is the event this instance is handling when its rule has
	// concurrency > 1 (each instance of the pool its own; see replica.go);
	// nil: the rule's (concurrency 1).
	own *callCause
	// replica is set while an extra instance of a pool runs its
	// initialisation: its watches are no-ops, its writes refused, the
	// first refusal kept in refused (it fails the load, whether the
	// rule's code checked the call's error or not).
	replica atomic.Bool
	refused atomic.Pointer[error]
}

var _ abi.Host = (*binding)(nil)

func newBinding(r *rule, in *instance, client Store) *binding {
	return &binding{r: r, in: in, client: client}
}

func (b *binding) check(verb, key string, patterns []string) error {
	if b.in.closed.Load() {
		return abi.Errorf(abi.StatusUnavailable, "%s %q: this version of %s was replaced or stopped", verb, key, b.r.name)
	}
	if key == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty key", verb)
	}
	if strings.HasPrefix(key, ReservedPrefix) {
		return abi.Errorf(abi.StatusDenied, "%s %q: keys under %s are reserved for the host", verb, key, ReservedPrefix)
	}
	if !allowed(patterns, key) {
		if t := b.r.svc.trace; t != nil {
			t.Denied(b.r.name, verb, key)
		}
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted for rule %s", verb, key, b.r.name)
	}
	return nil
}

func (b *binding) checkValue(verb, key string, value []byte, cfg RuleConfig) error {
	if len(value) > cfg.MaxValueBytes {
		return abi.Errorf(abi.StatusTooLarge, "%s %q: value of %d bytes exceeds the rule's limit of %d", verb, key, len(value), cfg.MaxValueBytes)
	}
	return nil
}

// staging returns where b's writes are staged: a dry run's, or the
// canary's while b's version runs in shadow; nil when they go to the store.
func (b *binding) staging() *staging.Staging {
	if b.inShadow() {
		return b.shadow.st
	}
	return b.r.svc.dry
}

// inShadow reports whether b's version runs as a canary's shadow.
func (b *binding) inShadow() bool { return b.shadow != nil && !b.shadow.live.Load() }

// Get implements abi.Host.
func (b *binding) Get(ctx context.Context, key string) (abi.Value, error) {
	if err := b.check("get", key, b.r.config().Read); err != nil {
		return abi.Value{}, err
	}
	var st staging.StagedStore = b.client
	if sg := b.staging(); sg != nil {
		st = sg // the staged writes, then the store
	}
	res, err := st.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return abi.Value{}, status.StoreError(err)
	}
	if !res.Found {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: res.Value, Version: res.Version.String()}, nil
}

// Set implements abi.Host.
func (b *binding) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	cfg := b.r.config()
	if err := b.refuseInReplica("set", key); err != nil {
		return "", err
	}
	if err := b.check("set", key, cfg.Write); err != nil {
		return "", err
	}
	if err := b.checkValue("set", key, value, cfg); err != nil {
		return "", err
	}
	if opts.Cond > abi.CondNEX {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: unknown condition %d", key, opts.Cond)
	}
	if opts.TTL < 0 || (opts.TTL > 0 && opts.TTL < time.Millisecond) {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: ttl must be 0 (none) or at least 1 ms", key)
	}
	so := protocol.SetOptions{Expiry: opts.TTL}
	switch opts.Cond {
	case abi.CondNX:
		so.Condition = protocol.CondNX
	case abi.CondNEX:
		so.Condition = protocol.CondNEX
	}
	var version string // the new one, or the stored one when not applied
	send := func(st staging.StagedStore, token hlc.HLC) (string, bool, error) {
		so.FencingToken = token
		res, err := st.Set(ctx, []byte(key), value, so)
		if err != nil {
			return "", false, status.StoreError(err)
		}
		version = res.Version.String()
		if !res.Applied {
			return "", false, abi.Errorf(abi.StatusNotApplied, "set %q: condition not met", key)
		}
		return version, false, nil
	}
	if sg := b.staging(); sg != nil {
		w := b.staged("SET", key, value)
		w.TTL, w.Cond, w.Fence = opts.TTL, staging.CondName(opts.Cond), opts.Fence
		err := sg.Write(ctx, w, b.r.locks.Holder(), send)
		return version, err
	}
	err := b.r.write(b.own, "set", key, opts.Fence, opts.TTL, value, b.sendTo(send))
	return version, err
}

// sendTo adapts send, a write made on the store it is given, to
// rule.write: made on the store, with the token rule.write fences it with.
func (b *binding) sendTo(send staging.StageFunc) func(token hlc.HLC) (string, bool, error) {
	return func(token hlc.HLC) (string, bool, error) { return send(b.client, token) }
}

// Del implements abi.Host.
func (b *binding) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	if err := b.refuseInReplica("del", key); err != nil {
		return err
	}
	if err := b.check("del", key, b.r.config().Write); err != nil {
		return err
	}
	send := func(st staging.StagedStore, token hlc.HLC) (string, bool, error) {
		n, err := st.Del(ctx, []byte(key), protocol.DelOptions{FencingToken: token})
		return "", err == nil && n == 1, status.DeleteResult("del", key, n, err)
	}
	if sg := b.staging(); sg != nil {
		w := b.staged("DEL", key, nil)
		w.Fence = opts.Fence
		return sg.Write(ctx, w, b.r.locks.Holder(), send)
	}
	return b.r.write(b.own, "del", key, opts.Fence, 0, nil, b.sendTo(send))
}

// VDel implements abi.Host.
func (b *binding) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	cfg := b.r.config()
	if err := b.refuseInReplica("vdel", key); err != nil {
		return err
	}
	if err := b.check("vdel", key, cfg.Write); err != nil {
		return err
	}
	if err := b.checkValue("vdel", key, value, cfg); err != nil {
		return err
	}
	send := func(st staging.StagedStore, token hlc.HLC) (string, bool, error) {
		n, err := st.VDel(ctx, []byte(key), value, protocol.DelOptions{FencingToken: token})
		return "", err == nil && n == 1, status.DeleteResult("vdel", key, n, err)
	}
	if sg := b.staging(); sg != nil {
		w := b.staged("VDEL", key, value)
		w.Fence = opts.Fence
		return sg.Write(ctx, w, b.r.locks.Holder(), send)
	}
	return b.r.write(b.own, "vdel", key, opts.Fence, 0, nil, b.sendTo(send))
}

// Watch implements abi.Host.
func (b *binding) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	if err := b.check("watch", key, b.r.config().Watch); err != nil {
		return err
	}
	if b.replica.Load() {
		return nil // the first instance's watches stand
	}
	return b.r.watch(ctx, b.in, key, opts)
}

// Unwatch implements abi.Host.
func (b *binding) Unwatch(ctx context.Context, key string) error {
	if err := b.check("unwatch", key, nil); err != nil {
		return err
	}
	if b.replica.Load() {
		return nil
	}
	return b.r.unwatch(ctx, b.in, key)
}

// Lock implements abi.Host.
func (b *binding) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	if err := b.refuseInReplica("lock", name); err != nil {
		return "", err
	}
	if err := b.checkLock("lock", name); err != nil {
		return "", err
	}
	if sg := b.staging(); sg != nil {
		w := b.staged("LOCK", name, []byte(b.r.locks.Holder()))
		w.TTL = ttl // reported, not applied: the host would renew the lease
		return sg.Lock(ctx, w)
	}
	return b.r.locks.Lock(ctx, name, ttl, opts.Wait)
}

// Unlock implements abi.Host.
func (b *binding) Unlock(ctx context.Context, name string) error {
	if err := b.refuseInReplica("unlock", name); err != nil {
		return err
	}
	if err := b.checkLock("unlock", name); err != nil {
		return err
	}
	if sg := b.staging(); sg != nil {
		return sg.Unlock(ctx, b.staged("UNLOCK", name, []byte(b.r.locks.Holder())))
	}
	return b.r.locks.Unlock(ctx, name)
}

// checkLock checks a lock name against the rule's permissions. A lease is a
// write of its key (SET NEX PX, VDEL to release), so it needs write
// permission as well as lock permission. Both are checked before any store
// request: a denied lock neither creates the key nor tells whether it exists.
func (b *binding) checkLock(verb, name string) error {
	cfg := b.r.config()
	if err := b.check(verb, name, cfg.Lock); err != nil {
		return err
	}
	if !allowed(cfg.Write, name) {
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted for rule %s (a lock writes its key, which the rule may not write)", verb, name, b.r.name)
	}
	return nil
}

// Log implements abi.Host. Every runtime's logs arrive here (log calls,
// Lua's print, WebAssembly and plugin output), held to the rule's log
// budget.
func (b *binding) Log(level int32, msg string) {
	b.r.logs.Write(slog.Level(level), msg)
}

// Timer implements abi.Host: the rule's timer name is kept in the store
// before it returns, then scheduled (see ruleTimers).
func (b *binding) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	cfg := b.r.config()
	if err := b.refuseInReplica("timer", name); err != nil {
		return err
	}
	if err := b.checkTimer("timer", name); err != nil {
		return err
	}
	if delay < 0 || opts.Every < 0 {
		return abi.Errorf(abi.StatusInvalid, "timer %q: delay and every must not be negative", name)
	}
	if opts.Every > 0 && opts.Every < time.Millisecond {
		return abi.Errorf(abi.StatusInvalid, "timer %q: every must be 0 (once) or at least 1 ms", name)
	}
	if len(opts.Payload) > cfg.MaxValueBytes {
		return abi.Errorf(abi.StatusTooLarge, "timer %q: payload of %d bytes exceeds the rule's limit of %d", name, len(opts.Payload), cfg.MaxValueBytes)
	}
	if b.inShadow() {
		return nil
	}
	return b.r.timers.arm(ctx, b.in, name, delay, opts.Every, opts.Payload, cfg.MaxTimers)
}

// Cancel implements abi.Host.
func (b *binding) Cancel(ctx context.Context, name string) error {
	if err := b.refuseInReplica("cancel", name); err != nil {
		return err
	}
	if err := b.checkTimer("cancel", name); err != nil {
		return err
	}
	if b.inShadow() {
		return nil
	}
	return b.r.timers.cancel(ctx, name)
}

// checkTimer checks the name of a timer and that this version still runs.
func (b *binding) checkTimer(verb, name string) error {
	if b.in.closed.Load() {
		return abi.Errorf(abi.StatusUnavailable, "%s %q: this version of %s was replaced or stopped", verb, name, b.r.name)
	}
	if name == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty timer name", verb)
	}
	if len(name) > MaxTimerName {
		return abi.Errorf(abi.StatusInvalid, "%s: timer name of %d bytes is longer than %d", verb, len(name), MaxTimerName)
	}
	return nil
}

// Now implements abi.Host: the host's clock (see hostClock), in Unix ms.
func (b *binding) Now() int64 { return b.r.svc.timers.Clock.NowMs() }

// staged is the staging.Write of op on key by the rule, in the event it is
// handling, for a dry run (see dryrun.go).
func (b *binding) staged(op, key string, value []byte) staging.Write {
	// A copy: the report keeps it, and value is only lent (abi.Host).
	return staging.Write{Rule: b.r.name, Op: op, Key: key, Value: bytes.Clone(value), Cause: b.handling()}
}
