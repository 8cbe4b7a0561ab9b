package host

import (
	"context"
	"fmt"
	"sync"

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

// refuseInReplica refuses verb (a write, lock or timer) on key while b is
// a replica running its initialisation.
func (b *binding) refuseInReplica(verb, key string) error {
	if !b.replica.Load() {
		return nil
	}
	err := abi.Errorf(abi.StatusDenied,
		"%s %q: rule %s has concurrency %d, so its top level runs once per instance; only the first instance's may write, lock or arm timers: write from a handler, or run the rule with concurrency 1",
		verb, key, b.r.name, b.r.config().Concurrency)
	b.refused.CompareAndSwap(nil, &err)
	return err
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
		rb.replica.Store(true)
		script, err := abandon.Aside(h.calls, ctx, r.name, "start", cfg.Grace, func(ctx context.Context) (abi.Script, error) {
			return prog.Start(ctx, h.hostFor(rb), cfg.limits())
		}, func(late abi.Script) { _ = late.Close(context.Background()) })
		if err == nil {
			rb.replica.Store(false)
			next.members = append(next.members, poolMember{script: script, own: rb.own}) // closed with next
			if refused := rb.refused.Load(); refused != nil {
				err = *refused // the rule went on without checking the call's error
			}
		}
		if err != nil {
			return fmt.Errorf("instance %d of %d (concurrency): %w", i, cfg.Concurrency, err)
		}
	}
	return nil
}
