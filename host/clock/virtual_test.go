package clock

import (
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// A virtual clock runs its calls only when Fire runs them: in time order,
// calls due at once in the order they were made; a stopped call never runs.
func TestVirtualClock(t *testing.T) {
	start := time.UnixMilli(1_700_000_000_000)
	c := NewVirtual(start)
	var got []string
	add := func(s string) func() { return func() { got = append(got, s) } }
	c.AfterFunc(2*time.Second, add("b"))
	c.AfterFunc(time.Second, add("a1"))
	c.AfterFunc(time.Second, add("a2"))
	stopped := c.AfterFunc(time.Second, add("never"))
	if !stopped.Stop() || stopped.Stop() {
		t.Fatal("Stop: want true once, then false")
	}
	if c.Fire() {
		t.Fatal("Fire ran a call before its time")
	}
	if at, ok := c.Next(); !ok || !at.Equal(start.Add(time.Second)) {
		t.Fatalf("Next = %v, %v; want start+1s", at, ok)
	}
	c.Set(start.Add(5 * time.Second))
	c.Set(start) // never back
	for c.Fire() {
	}
	if !slices.Equal(got, []string{"a1", "a2", "b"}) || !c.Now().Equal(start.Add(5*time.Second)) {
		t.Fatalf("ran %q at %v; want a1 a2 b at start+5s", got, c.Now())
	}
	if _, ok := c.Next(); ok {
		t.Fatal("Next reports a call after all ran")
	}
}
