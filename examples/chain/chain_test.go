package chain_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
)

// The README's session, step by step, through the real host on the embedded
// broker: each user write, the events each rule handles because of it, and
// the keys afterwards ("" = absent).
var steps = []struct {
	key, value string
	handled    map[string]uint64 // rule -> events handled so far
	want       map[string]string
}{
	{"alarm/armed", "yes", map[string]uint64{"door.lua": 0, "alarm.lua": 0},
		map[string]string{"alarm/state": "", "siren/garden": "", "lights/hall": ""}},
	{"door/front", "open", map[string]uint64{"door.lua": 1, "alarm.lua": 1}, // door -> alarm/state -> siren
		map[string]string{"alarm/state": "intrusion", "siren/garden": "on", "lights/hall": ""}},
	{"alarm/state", "clear", map[string]uint64{"door.lua": 1, "alarm.lua": 2},
		map[string]string{"alarm/state": "clear", "siren/garden": "off", "lights/hall": ""}},
	{"door/front", "closed", map[string]uint64{"door.lua": 2, "alarm.lua": 2},
		map[string]string{"alarm/state": "clear", "siren/garden": "off", "lights/hall": ""}},
	{"alarm/armed", "no", map[string]uint64{"door.lua": 2, "alarm.lua": 2},
		map[string]string{"alarm/state": "clear", "siren/garden": "off", "lights/hall": ""}},
	{"door/front", "open", map[string]uint64{"door.lua": 3, "alarm.lua": 2}, // disarmed: the light instead
		map[string]string{"alarm/state": "clear", "siren/garden": "off", "lights/hall": "on"}},
}

// startChain runs the rules of this folder in a host on an embedded broker
// and returns it with a client acting as the user ("chain-user").
func startChain(t *testing.T, ctx context.Context) (*host.Host, *protocol.Client) {
	t.Helper()
	lr := lua.New(lua.Config{})
	t.Cleanup(func() { _ = lr.Close(context.Background()) }) // after the host's Close
	return examplehost.Start(ctx, t, "chain", ".", lr)
}

func TestChain(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, user := startChain(t, ctx)
	handled := func() map[string]uint64 {
		m := map[string]uint64{}
		for _, s := range h.Status() {
			m[filepath.Base(s.Path)] = s.Handled
			if s.Failed != 0 || s.Dropped != 0 {
				t.Fatalf("%s: %d failed, %d dropped events", s.Path, s.Failed, s.Dropped)
			}
		}
		return m
	}
	if got := handled(); len(got) != 2 {
		t.Fatalf("loaded rules %v, want door.lua and alarm.lua", got)
	}

	for i, st := range steps {
		if _, err := user.Set(ctx, []byte(st.key), []byte(st.value), protocol.SetOptions{}); err != nil {
			t.Fatalf("step %d: set %s: %v", i, st.key, err)
		}
		// The chain has run once each rule has handled what the step
		// causes (a step that triggers nothing expects the same counts;
		// a stray event would show in a later step's counts).
		deadline := time.Now().Add(20 * time.Second)
		for {
			got := handled()
			if equal(got, st.handled) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d (%s = %s): rules handled %v, want %v", i, st.key, st.value, got, st.handled)
			}
			time.Sleep(5 * time.Millisecond)
		}
		// The last write of the step may still be in flight when the
		// handled count moves: wait for the expected values.
		for key, want := range st.want {
			for {
				res, err := user.Get(ctx, []byte(key), protocol.CallOptions{})
				if err != nil {
					t.Fatalf("step %d: get %s: %v", i, key, err)
				}
				if string(res.Value) == want && res.Found == (want != "") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("step %d (%s = %s): %s = %q (found %t), want %q", i, st.key, st.value, key, res.Value, res.Found, want)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	if n := h.Stats().LoopsDamped; n != 0 {
		t.Fatalf("%d events damped as a feedback loop; the chain must end by itself", n)
	}
}

func equal(a, b map[string]uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
