package host

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// A burst that wakes many rules runs at most MaxConcurrentCalls handlers
// at once; the others wait in their mailboxes and all are handled. Without
// the gate all six handlers ran at once.
func TestConcurrentCallsAreBounded(t *testing.T) {
	const rules, limit = 6, 2
	e := newEnv(t, func(o *Config) {
		o.MaxConcurrentCalls = limit
		o.Defaults.Timeout = time.Minute // the test, not the deadline, ends each call
	})
	var inflight, most, handled atomic.Int64
	tokens := make(chan struct{})
	for i := range rules {
		e.load(fmt.Sprintf("g%d", i), goRule{init: watchInit("k"), handle: func(ctx context.Context, _ abi.Host, _ abi.Event) error {
			n := inflight.Add(1)
			defer inflight.Add(-1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			select {
			case <-tokens:
				handled.Add(1)
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}})
	}
	e.set("k", "burst")
	for left := int64(rules); left > 0; left-- {
		want := min(limit, left)
		waitFor(t, fmt.Sprintf("%d handlers running", want), func() bool { return inflight.Load() >= want })
		tokens <- struct{}{}
	}
	waitFor(t, "every rule handled the burst", func() bool { return handled.Load() == rules })
	if m := most.Load(); m != limit {
		t.Fatalf("%d handlers ran at once, want at most (and, in a burst, exactly) %d", m, limit)
	}
}

// A handler abandoned while stuck gives its place back: with one place, a
// healthy rule's event waiting behind a rule stuck forever is handled once
// the stuck rule is removed (abandoned after its deadline plus grace), not
// only when the stuck call returns, which here it never does.
func TestAbandonedCallLeavesTheGate(t *testing.T) {
	e, rt := stuckEnv(t, func(o *Config) { o.MaxConcurrentCalls = 1 })
	p := e.writeStuck("a", "handle")
	if err := e.host.Load(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	e.set("k", "1")
	rt.waitBlocked(t, "handle a.stuck")
	seen := e.loadValues("healthy", "k")
	e.set("k", "2")
	var err error
	within(t, stuckBound, "Remove", func() { err = e.host.Remove(e.ctx(), p) })
	if err != nil {
		t.Fatalf("remove: %v", err)
	}
	waitFor(t, "the healthy rule handled k=2 while the abandoned call still runs", func() bool {
		return slices.Equal(seen(), []string{"2"})
	})
	if n := e.host.Stats().Stuck; n != 1 {
		t.Fatalf("stuck goroutines = %d, want 1 (the abandoned call has not returned)", n)
	}
}
