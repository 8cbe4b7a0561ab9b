package loadretry

import (
	"testing"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// The schedule: the first wait, doubled after each failure of the same
// content up to Max, back to the first for another content;
// nothing when retries are off; take hands out what is due, once, sorted;
// now makes everything due; drop cancels.
func TestRetrySchedule(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	q := New(time.Second, clock.Real{}, nil)
	a, b := [32]byte{1}, [32]byte{2}
	for i, want := range []time.Duration{time.Second, 2 * time.Second, 4 * time.Second} {
		if at := q.Failed("/r/x", a, t0); at.Sub(t0) != want {
			t.Fatalf("failure %d: next try after %v, want %v", i+1, at.Sub(t0), want)
		}
	}
	if at := q.Failed("/r/x", b, t0); at.Sub(t0) != time.Second {
		t.Fatalf("another content: after %v, want the first wait", at.Sub(t0))
	}
	for range 20 {
		q.Failed("/r/x", b, t0)
	}
	if at := q.At("/r/x"); at.Sub(t0) != Max {
		t.Fatalf("after many failures: %v, want %v", at.Sub(t0), Max)
	}
	q.Failed("/r/a", a, t0)
	if got := q.take(t0.Add(time.Second)); len(got) != 1 || got[0] != "/r/a" {
		t.Fatalf("due after 1s: %v", got)
	}
	if got := q.take(t0.Add(time.Hour)); len(got) != 1 || got[0] != "/r/x" {
		t.Fatalf("due after an hour: %v (a taken retry is not due again)", got)
	}
	if _, ok := q.next(); ok {
		t.Fatal("a retry scheduled after all were taken")
	}
	q.Failed("/r/b", a, time.Now())
	q.Failed("/r/a", b, time.Now())
	q.Now()
	if got := q.take(time.Now()); len(got) != 2 || got[0] != "/r/a" || got[1] != "/r/b" {
		t.Fatalf("due after now: %v", got)
	}
	q.Failed("/r/a", b, t0)
	q.Drop("/r/a")
	if at := q.At("/r/a"); !at.IsZero() {
		t.Fatalf("dropped, still at %v", at)
	}
	if off := New(-1, clock.Real{}, nil); !off.Failed("/r/a", a, t0).IsZero() {
		t.Fatal("retries off, one scheduled")
	}
}
