package host

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/abandon"
	"github.com/ssrun/ssrun/host/provenance"
)

// The instances of a version of a rule with concurrency N > 1 (see
// concurrency.go). A runtime never calls one Script's Handle concurrently,
// so the version runs N Scripts, each started from the same Program: the
// first is the version's own (instance.script), its initialisation the
// rule's; the N-1 others, its replicas, run their initialisation against
// a host where watch, watch_pattern and their unwatch are no-ops (the
// first instance's stand), reads work, and writes, locks and timers are
// refused with an error that says why, and the load fails with it (even
// when the rule's code ignores the call's error), so a top level that
// writes fails the load instead of writing N times. Once started, every instance
// handles events alike (writes, locks and timers included), each with its
// own event for lineage and provenance (callCause).
//
// Cost: N Lua states or WebAssembly instances, each with its own memory of
// up to the rule's memory limit, or N plugin processes.

// callCause is the event an instance of a pool is handling, for the
// lineage and provenance of its writes.
type callCause struct {
	mu    sync.Mutex
	lin   provenance.Lineage
	cause provenance.Cause
}

// set records the event being handled (zero values: none).
func (c *callCause) set(lin provenance.Lineage, cause provenance.Cause) {
	c.mu.Lock()
	c.lin, c.cause = lin, cause
	c.mu.Unlock()
}

// get returns the event being handled and its lineage.
func (c *callCause) get() (provenance.Lineage, provenance.Cause) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lin, c.cause
}

// poolMember is one instance of a version's pool: its script and the event it
// handles.
type poolMember struct {
	script abi.Script
	own    *callCause
}

// handling returns the event b's instance is handling (zero outside a
// handler).
func (b *binding) handling() provenance.Cause {
	_, c := b.r.handlingIn(b.own)
	return c
}

// replicaLink is the link of a pool's replica in its abi.Host chain
// (binding.chain): while the replica runs its initialisation (starting),
// watch, watch_pattern and their unwatch are no-ops and writes, locks and
// timers are refused, the first refusal kept in refused (it fails the load,
// whether the rule's code checked the call's error or not). Reads, and
// every call once the replica has started, go on to next.
type replicaLink struct {
	abi.Host // next: what the replica calls once started
	rule     string
	conc     int // the rule's concurrency, in the refusal
	starting atomic.Bool
	refused  atomic.Pointer[error]
}

// refuse refuses verb (a write, lock or timer) on key while the replica
// starts.
func (l *replicaLink) refuse(verb, key string) error {
	if !l.starting.Load() {
		return nil
	}
	err := abi.Errorf(abi.StatusDenied,
		"%s %q: rule %s has concurrency %d, so its top level runs once per instance; only the first instance's may write, lock or arm timers: write from a handler, or run the rule with concurrency 1",
		verb, key, l.rule, l.conc)
	l.refused.CompareAndSwap(nil, &err)
	return err
}

func (l *replicaLink) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	if err := l.refuse("set", key); err != nil {
		return "", err
	}
	return l.Host.Set(ctx, key, value, opts)
}

func (l *replicaLink) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	if err := l.refuse("del", key); err != nil {
		return err
	}
	return l.Host.Del(ctx, key, opts)
}

func (l *replicaLink) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	if err := l.refuse("vdel", key); err != nil {
		return err
	}
	return l.Host.VDel(ctx, key, value, opts)
}

func (l *replicaLink) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	if err := l.refuse("lock", name); err != nil {
		return "", err
	}
	return l.Host.Lock(ctx, name, ttl, opts)
}

func (l *replicaLink) Unlock(ctx context.Context, name string) error {
	if err := l.refuse("unlock", name); err != nil {
		return err
	}
	return l.Host.Unlock(ctx, name)
}

func (l *replicaLink) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	if err := l.refuse("timer", name); err != nil {
		return err
	}
	return l.Host.Timer(ctx, name, delay, opts)
}

func (l *replicaLink) Cancel(ctx context.Context, name string) error {
	if err := l.refuse("cancel", name); err != nil {
		return err
	}
	return l.Host.Cancel(ctx, name)
}

// The first instance's watches stand: a starting replica's are no-ops.

func (l *replicaLink) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	if l.starting.Load() {
		return nil
	}
	return l.Host.Watch(ctx, key, opts)
}

func (l *replicaLink) Unwatch(ctx context.Context, key string) error {
	if l.starting.Load() {
		return nil
	}
	return l.Host.Unwatch(ctx, key)
}

func (l *replicaLink) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	if l.starting.Load() {
		return nil
	}
	return l.Host.WatchPattern(ctx, pattern, opts)
}

func (l *replicaLink) UnwatchPattern(ctx context.Context, pattern string) error {
	if l.starting.Load() {
		return nil
	}
	return l.Host.UnwatchPattern(ctx, pattern)
}

// startPool starts the replicas of next, the version of r whose own
// instance started with b, when r's concurrency is above 1, one after the
// other (their initialisations must not overlap the store's state they
// read with each other's). On error the replicas started are closed with
// next (by the caller, closeInstance).
func (h *Host) startPool(ctx context.Context, r *rule, next *instance, b *binding, prog abi.Program, cfg RuleConfig) error {
	if cfg.Concurrency <= 1 {
		return nil
	}
	next.members = append(next.members, poolMember{script: next.script, own: b.own})
	for i := 2; i <= cfg.Concurrency; i++ {
		rb := newBinding(r, next, h.client)
		rb.own = &callCause{}
		rb.replica = &replicaLink{rule: r.name, conc: cfg.Concurrency}
		rb.replica.starting.Store(true)
		script, err := abandon.Aside(h.calls, ctx, r.name, "start", cfg.Grace, func(ctx context.Context) (abi.Script, error) {
			return prog.Start(ctx, h.hostFor(rb), cfg.limits())
		}, func(late abi.Script) { _ = late.Close(context.Background()) })
		if err == nil {
			rb.replica.starting.Store(false)
			next.members = append(next.members, poolMember{script: script, own: rb.own}) // closed with next
			if refused := rb.replica.refused.Load(); refused != nil {
				err = *refused // the rule went on without checking the call's error
			}
		}
		if err != nil {
			return fmt.Errorf("instance %d of %d (concurrency): %w", i, cfg.Concurrency, err)
		}
	}
	return nil
}
