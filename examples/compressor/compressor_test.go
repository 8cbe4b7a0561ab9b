package compressor_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
)

const (
	demand = "compressor/demand"
	minKey = "compressor/min_ms"
	state  = "compressor/state"
	since  = "compressor/since"
	minMS  = 3000
)

// TestMinimumOnOffTime drives compressor.lua through the real host on the
// embedded broker: demand that changes sooner than the minimum time is
// followed when the hold ends, also when the host restarts during the hold
// (and stays down past its end: then at once), and the compressor never
// switches twice within the minimum time.
func TestMinimumOnOffTime(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rt := lua.New(lua.Config{})
	t.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the hosts' cleanups
	r := examplehost.StartRestartable(ctx, t, ".", rt)
	r.Record(state)
	r.Set(minKey, strconv.Itoa(minMS))

	// On at once: nothing ran before.
	r.Set(demand, "on")
	at := []int64{switched(t, r, 1, "on")} // compressor/since of each switch

	// Off is asked for at once, but the host restarts during the hold and
	// stays down past its end: the new host switches off when it starts.
	r.Set(demand, "off")
	r.WaitHandled(2)
	r.Restart(func() { examplehost.WaitClock(t, at[0]+minMS) })
	at = append(at, switched(t, r, 2, "off"))
	r.WaitHandled(1) // the hold's TIMER

	// On again at once, with a restart during the hold: on when it ends.
	r.Set(demand, "on")
	r.WaitHandled(2)
	r.Restart(nil)
	at = append(at, switched(t, r, 3, "on"))
	r.WaitHandled(1)

	// A demand that flaps back within the hold changes nothing: the hold
	// armed by "off" is cancelled by "on", and nothing fires at its end.
	r.Set(demand, "off")
	r.Set(demand, "on")
	r.WaitHandled(3)
	examplehost.WaitClock(t, at[2]+minMS)
	r.Set(demand, "on") // one more event, after the cancelled hold's end
	r.WaitHandled(4)
	if got := r.Changes(state); len(got) != 3 {
		t.Fatalf("state changed %d times, want 3: %v", len(got), values(got))
	}

	// The switches kept the minimum time between them, on the host's clock
	// the rule decides with (compressor/since, written at each switch).
	for i := 1; i < len(at); i++ {
		if gap := at[i] - at[i-1]; gap < minMS {
			t.Errorf("switch %d came %d ms after the previous one, want >= %d", i+1, gap, minMS)
		}
	}
}

// switched waits for the n-th change of the state, checks it is to want,
// and returns compressor/since.
func switched(t *testing.T, r *examplehost.Restartable, n int, want string) int64 {
	t.Helper()
	ch := r.WaitChanges(state, n)
	if got := ch[len(ch)-1]; got.Op != protocol.OpSet || string(got.Value) != want {
		t.Fatalf("state change %d: %s %q, want SET %q", n, got.Op, got.Value, want)
	}
	ms, err := strconv.ParseInt(r.Get(since), 10, 64)
	if err != nil {
		t.Fatalf("%s: %v", since, err)
	}
	return ms
}

func values(evs []protocol.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, string(ev.Value))
	}
	return out
}
