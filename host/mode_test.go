package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// In mode latest a rule never handles a change that a newer change of its
// key replaced while it waited, even with room in the mailbox; other keys
// keep their order.
func TestModeLatest(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"latest.gorule": {Mode: ModeLatest, Timeout: 30 * time.Second}}
	})
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	e.load("latest", goRule{init: watchInit("k", "j"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s=%s/%d", ev.Key, ev.Value, ev.Coalesced))
		first := len(seen) == 1
		mu.Unlock()
		if first {
			if err := awaitRelease(ctx, release); err != nil {
				return err
			}
		}
		return nil
	}})
	e.set("k", "0")
	waitFor(t, "the rule blocked in its first event", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	for i := 1; i <= 5; i++ {
		e.set("k", strconv.Itoa(i))
		if i == 2 {
			e.set("j", "x")
		}
	}
	waitFor(t, "k's changes conflated", func() bool { return e.status("latest").Coalesced == 4 })
	close(release)
	waitFor(t, "the rule handled what waited", func() bool { return e.status("latest").Handled == 3 })
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(seen, ","), "k=0/0,k=5/4,j=x/0"; got != want {
		t.Fatalf("handled %s, want %s (k's first waiting change kept its place, replaced by its last)", got, want)
	}
	if st := e.status("latest"); st.Dropped != 0 {
		t.Fatalf("dropped %d", st.Dropped)
	}
}

// In mode restart a change of a key cuts the running call of the same key
// (counted as restarted, not failed), not that of another key; the key's
// latest change is handled next.
func TestModeRestart(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"restart.gorule": {Mode: ModeRestart, Timeout: 30 * time.Second}}
	})
	var mu sync.Mutex
	var seen []string
	e.load("restart", goRule{init: watchInit("k", "j"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s=%s", ev.Key, ev.Value))
		mu.Unlock()
		if string(ev.Value) == "slow" {
			<-ctx.Done() // only a cut (or the deadline) ends it
			return ctx.Err()
		}
		return nil
	}})
	e.set("k", "slow")
	waitFor(t, "k's slow call running", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	e.set("j", "x")
	waitFor(t, "j waiting", func() bool { return e.status("restart").Queued == 1 })
	if st := e.status("restart"); st.Restarted != 0 {
		t.Fatalf("a change of another key cut the call: %+v", st)
	}
	e.set("k", "fast")
	waitFor(t, "everything handled", func() bool { return e.status("restart").Handled == 2 })
	st := e.status("restart")
	if st.Restarted != 1 || st.Failed != 0 {
		t.Fatalf("restarted %d failed %d, want 1 and 0", st.Restarted, st.Failed)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(seen, ","), "k=slow,j=x,k=fast"; got != want {
		t.Fatalf("handled %s, want %s", got, want)
	}
}

// Mode restart cuts a Lua handler spinning in a loop (the runtime stops it
// between instructions) when its key changes again; the state is kept, and
// the newer change is handled.
func TestModeRestartCutsLua(t *testing.T) {
	e := newE2E(t, sandbox{kind: "lua"}, func(o *Config) {
		o.Rules = map[string]RuleConfig{"spin.lua": {Mode: ModeRestart, Timeout: 5 * time.Minute}}
	})
	e.loadRule("spin.lua", []byte(`local ss = require("ssrun")
ss.watch("k")
calls = 0
function on_event(ev)
  calls = calls + 1
  if ev.value == "spin" then
    ss.set("spinning", "yes")
    while true do end
  end
  ss.set("out", ev.value .. " after " .. calls .. " calls")
end
`))
	e.set("k", "spin")
	e.waitValue("spinning", "yes")
	e.set("k", "go")
	e.waitValue("out", "go after 2 calls")
	// The handler's write comes a moment before its call is counted:
	// wait for the counts, then hold them to exactly these.
	waitFor(t, "the second call counted", func() bool { return e.ruleStatus("spin.lua").Handled >= 1 })
	if st := e.ruleStatus("spin.lua"); st.Restarted != 1 || st.Failed != 0 || st.Handled != 1 {
		t.Fatalf("restarted %d failed %d handled %d, want 1, 0, 1", st.Restarted, st.Failed, st.Handled)
	}
}

// Property: under every mode, random bursts over few keys into a rule
// stuck until the burst is over, with a random small mailbox: each key's
// versions reach the rule in increasing order and the rule ends at each
// key's last value (none dropped: the keys are fewer than mailbox_keys).
func TestModesBurstProperty(t *testing.T) {
	for _, mode := range []string{ModeQueued, ModeLatest, ModeRestart} {
		for seed := range uint64(5) {
			t.Run(fmt.Sprintf("%s/%d", mode, seed), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(len(mode))))
				keys := 40 * (1 + rng.IntN(2))
				b := newBurst(keys, keys*(1+rng.IntN(8)))
				b.open = make(chan struct{})
				h, user := overloadHost(t, b.rule(), RuleConfig{Mailbox: 1 + rng.IntN(16), Mode: mode})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				last, err := b.send(ctx, user)
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "every change routed", func() bool { return h.Stats().Notifications >= uint64(b.changes) })
				close(b.open)
				waitFor(t, "the rule settled", func() bool { return b.settled(h, "burst") })
				if n := b.stale(last); n != 0 {
					t.Fatalf("%d of %d keys stale", n, keys)
				}
				b.mu.Lock()
				defer b.mu.Unlock()
				if b.backwards != 0 {
					t.Fatalf("%d events went back in their key's versions", b.backwards)
				}
			})
		}
	}
}
