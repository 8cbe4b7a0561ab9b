package host

import (
	"context"
	"log/slog"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/guard"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// binding is the store link of one version (in) of a rule (r): the last
// link of the abi.Host chain its script calls (docs/architecture.md, "One
// call, from the handler to the store"), which makes each call on the store
// and the rule: reads
// from the store, writes through the rule (fenced, damped, remembered for
// echo suppression and the journal: rule.write), watches, locks, logs and
// timers the rule's. The links in front of it (chain) check the call
// (internal/guard), refuse a pool's replica its writes while it starts
// (replica.go), and stage the writes of a dry run or a canary's shadow
// (host/staging, canary.go); it checks none of that again.
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
	// replica is set for an extra instance of a pool: the link that
	// refuses its writes while it runs its initialisation (replica.go).
	replica *replicaLink
}

var _ abi.Host = (*binding)(nil)

func newBinding(r *rule, in *instance, client Store) *binding {
	return &binding{r: r, in: in, client: client}
}

// chain returns the abi.Host b's version calls: the guard, then for a
// replica its link, then in a dry run the staging link, or for a canary's
// shadow its switch between the staging link and b (live once proven),
// then b. Each feature is a link present or not; none is a branch here.
func (b *binding) chain() abi.Host {
	var h abi.Host = b
	switch {
	case b.shadow != nil:
		h = &shadowed{c: b.shadow, staged: b.stagingLink(b.shadow.st, true), live: b}
	case b.r.svc.dry != nil:
		h = b.stagingLink(b.r.svc.dry, false)
	}
	if b.replica != nil {
		b.replica.Host = h
		h = b.replica
	}
	return guard.New(h, guard.Rule{
		Name:     b.r.name,
		Reserved: ReservedPrefix,
		MaxTimer: MaxTimerName,
		Limits:   b.r.limits,
		Closed:   b.in.closed.Load,
		Denied:   b.r.denied(),
	})
}

// stagingLink returns the link that stages b's writes in st, in front of
// b; noTimers for a canary's shadow (the live version keeps the timers).
func (b *binding) stagingLink(st *staging.Staging, noTimers bool) abi.Host {
	return staging.NewHost(b, st, staging.Rule{
		Name:   b.r.name,
		Holder: b.r.locks.Holder(),
		Cause:  b.handling,
		Listed: func(pattern string) func(key string) bool {
			pat, err := patterns.Compile(pattern) // the store link compiled it: it compiles
			read := b.r.config().Read
			return func(key string) bool {
				return err == nil && pat.Match(key) && allowed(read, key) && !hasReservedPrefix(key)
			}
		},
		NoTimers: noTimers,
	})
}

// inShadow reports whether b's version runs as a canary's shadow.
func (b *binding) inShadow() bool { return b.shadow != nil && !b.shadow.live.Load() }

// Get implements abi.Host.
func (b *binding) Get(ctx context.Context, key string) (abi.Value, error) {
	return staging.GetOn(ctx, b.client, key)
}

// Set implements abi.Host.
func (b *binding) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	var version string // the new one, or the stored one when not applied
	err := b.r.write(b.own, "set", key, opts.Fence, opts.TTL, value, b.onStore(staging.SetOn(ctx, key, value, opts, &version)))
	return version, err
}

// onStore adapts send, a write made on the store it is given, to
// rule.write: made on the store, with the token rule.write fences it with.
func (b *binding) onStore(send staging.StageFunc) func(token hlc.HLC) (string, bool, error) {
	return func(token hlc.HLC) (string, bool, error) { return send(b.client, token) }
}

// Del implements abi.Host.
func (b *binding) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	return b.r.write(b.own, "del", key, opts.Fence, 0, nil, b.onStore(staging.DelOn(ctx, key)))
}

// VDel implements abi.Host.
func (b *binding) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	return b.r.write(b.own, "vdel", key, opts.Fence, 0, nil, b.onStore(staging.VDelOn(ctx, key, value)))
}

// Watch implements abi.Host.
func (b *binding) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	return b.r.watch(ctx, b.in, key, opts)
}

// Unwatch implements abi.Host.
func (b *binding) Unwatch(ctx context.Context, key string) error {
	return b.r.unwatch(ctx, b.in, key)
}

// Lock implements abi.Host.
func (b *binding) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	return b.r.locks.Lock(ctx, name, ttl, opts.Wait)
}

// Unlock implements abi.Host.
func (b *binding) Unlock(ctx context.Context, name string) error {
	return b.r.locks.Unlock(ctx, name)
}

// Log implements abi.Host. Every runtime's logs arrive here (log calls,
// Lua's print, WebAssembly and plugin output), held to the rule's log
// budget.
func (b *binding) Log(level int32, msg string) {
	b.r.logs.Write(slog.Level(level), msg)
}

// Timer implements abi.Host: the rule's timer name is kept in the store
// before it returns, then scheduled (see ruletimers.Timers).
func (b *binding) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	return b.r.timers.Arm(ctx, b.in, name, delay, opts.Every, opts.Payload, b.r.config().MaxTimers)
}

// Cancel implements abi.Host.
func (b *binding) Cancel(ctx context.Context, name string) error {
	return b.r.timers.Cancel(ctx, name)
}

// Now implements abi.Host: the host's clock (see hostClock), in Unix ms.
func (b *binding) Now() int64 { return b.r.svc.timers.Clock.NowMs() }

// limits are r's permissions and value limit now, for its guard.
func (r *rule) limits() guard.Limits { return r.config().guardLimits() }

// guardLimits are c's permissions and value limit, for a guard.
func (c RuleConfig) guardLimits() guard.Limits {
	return guard.Limits{Read: c.Read, Write: c.Write, Watch: c.Watch, Lock: c.Lock, MaxValueBytes: c.MaxValueBytes}
}

// denied is what r's guard tells of a call the permissions refuse: the
// tracer, if any.
func (r *rule) denied() func(verb, key string) {
	t := r.svc.trace
	if t == nil {
		return nil
	}
	return func(verb, key string) { t.Denied(r.name, verb, key) }
}
