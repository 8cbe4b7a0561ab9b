package thermostats_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
)

// fleet is how many thermostats the end-to-end test adds (200 with -short).
func fleet() int {
	if testing.Short() {
		return 200
	}
	return 1000
}

// On the real host and embedded broker, thermostats added while the rule
// runs, while no host runs (a restart in the middle) and after it all end
// with their HVAC target set to the clamped set point, and the set points
// outside the range written back; none is missed or handled with a
// failure.
func TestThermostatsFleet(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := lua.New(lua.Config{})
	t.Cleanup(func() { rt.Close(context.Background()) })
	// A rescan every 200 ms (10 s by default) keeps the test short.
	r := examplehost.StartRestartableWith(ctx, t, ".", func(c *host.Config) { c.Defaults.Rescan = 200 * time.Millisecond }, rt)
	n := fleet()
	setPoint := func(i int) int { return (i * 7) % 40 } // 0..39: below, inside and above 16..28
	add := func(from, to int) {
		for i := from; i < to; i++ {
			r.Set(fmt.Sprintf("thermostats/%04d/setPoint", i), strconv.Itoa(setPoint(i)))
		}
	}
	add(0, n*2/5)
	r.Restart(func() { add(n*2/5, n*7/10) }) // these while no host runs
	add(n*7/10, n)

	testutil.WaitFor(t, fmt.Sprintf("%d HVAC targets", n), func() bool {
		k := 0
		for _, err := range r.User.Keys(ctx, []byte("hvac/*/target"), protocol.ScanOptions{}) {
			if err != nil {
				return false
			}
			k++
		}
		return k == n
	})
	for i := range n {
		want := strconv.Itoa(min(28, max(16, setPoint(i))))
		if got := r.Get(fmt.Sprintf("hvac/%04d/target", i)); got != want {
			t.Errorf("hvac/%04d/target = %q, want %q (set point %d)", i, got, want, setPoint(i))
		}
		if got := r.Get(fmt.Sprintf("thermostats/%04d/setPoint", i)); got != want {
			t.Errorf("thermostats/%04d/setPoint = %q, want %q written back", i, got, want)
		}
	}
	st := r.Status()
	if st.PatternKeys != n || st.Failed != 0 || st.Dropped != 0 {
		t.Errorf("status: %d keys watched, %d failed, %d dropped; want %d, 0, 0", st.PatternKeys, st.Failed, st.Dropped, n)
	}
	// Still live: a change of an existing thermostat is handled.
	r.Set("thermostats/0003/setPoint", "17")
	testutil.WaitFor(t, "hvac/0003/target = 17", func() bool { return r.Get("hvac/0003/target") == "17" })
}
