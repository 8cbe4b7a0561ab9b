package abandon

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// A call whose result Aside returned is no longer live: a caller asking
// the tracker right after finds nothing running. Before, the goroutine
// ended its task after handing the result over, so a host's failed load
// could still list "start r" (TestFailedFirstLoadLeavesNothing, once in a
// full -race run).
func TestReturnedCallIsNotLive(t *testing.T) {
	calls := NewTracker(clock.Real{})
	for i := range 2000 {
		v, err := Aside(calls, context.Background(), "r", "start", time.Minute, func(context.Context) (int, error) { return i, nil }, nil)
		if err != nil || v != i {
			t.Fatalf("call %d: %v, %v", i, v, err)
		}
		if live := calls.Live(); len(live) != 0 {
			t.Fatalf("after call %d returned: still live %q", i, live)
		}
	}
}

// A call still running when its context has ended and the grace passed is
// abandoned: Aside returns a *StuckError, the task stays live and counted
// as stuck until the call returns, and late gets its result.
func TestStuckCallAbandonedAndDisposed(t *testing.T) {
	vc := clock.NewVirtual(time.Unix(1_700_000_000, 0))
	calls := NewTracker(vc)
	ctx, cancel := context.WithCancel(context.Background())
	release, lateGot := make(chan struct{}), make(chan int, 1)
	type res struct {
		v   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		v, err := Aside(calls, ctx, "r", "handle", time.Second, func(context.Context) (int, error) {
			<-release // ignores its context, as a stuck guest would
			return 7, nil
		}, func(v int) { lateGot <- v })
		done <- res{v, err}
	}()
	cancel()
	testutil.WaitFor(t, "the grace armed", func() bool { _, ok := vc.Next(); return ok })
	vc.Set(vc.Now().Add(time.Second))
	vc.Fire()
	r := <-done
	var se *StuckError
	if !errors.As(r.err, &se) || se.Rule != "r" || se.Call != "handle" {
		t.Fatalf("Aside = %v, %v; want a *StuckError of handle r", r.v, r.err)
	}
	if calls.Stuck() != 1 || len(calls.Live()) != 1 {
		t.Fatalf("abandoned call: stuck %d, live %q; want it counted until it returns", calls.Stuck(), calls.Live())
	}
	close(release)
	if v := <-lateGot; v != 7 {
		t.Fatalf("late got %d, want 7", v)
	}
	testutil.WaitFor(t, "the abandoned call ended", func() bool { return len(calls.Live()) == 0 })
	if left := calls.Wait(context.Background()); left != nil {
		t.Fatalf("Wait after every call ended: %q", left)
	}
}
