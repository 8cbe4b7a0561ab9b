package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/staging"
)

// withCanary gives the rule file name a canary.
func withCanary(name string, c Canary) func(*Config) {
	return func(o *Config) { o.Rules = map[string]RuleConfig{name: {Canary: c}} }
}

// A new version of the thermostat that clamps at 30 instead of 28 runs in
// shadow; at the first set point above 28 it writes differently, and the
// canary is refused: the log shows the event and both sides' writes, the
// old version stays live (it clamps a later set point at 28), the status
// says canary refused, and the shadow's "29" never reaches the store.
func TestCanaryRefusesDifferentVersion(t *testing.T) {
	sb := sandbox{kind: "lua"}
	e := newE2E(t, sb, withCanary("thermostat.lua", Canary{Events: 5}))
	v1 := thermostatSource(t)
	v2 := variant(t, v1, "local MIN, MAX  = 16, 28", "local MIN, MAX  = 16, 30")
	e.loadRule("thermostat.lua", v1)
	e.set("thermostat1/setPoint", "22")
	e.waitValue("hvac1/target", "22")
	old := e.ruleStatus("thermostat.lua").Hash
	watcher := watchKeys(t, e, "hvac1/target", "sentinel")

	e.loadRule("thermostat.lua", v2)
	if s := e.ruleStatus("thermostat.lua"); s.State != StateCanary || s.Hash != old {
		t.Fatalf("after the reload: state %q hash %s, want %q and the old hash %s", s.State, s.Hash, StateCanary, old)
	}
	e.set("thermostat1/setPoint", "29")
	waitFor(t, "canary refused", func() bool { return e.ruleStatus("thermostat.lua").State == StateCanaryRefused })
	lines := e.logLines("canary refused", "rule=thermostat.lua", `event="SET thermostat1/setPoint \"29\""`)
	if len(lines) != 1 || !strings.Contains(lines[0], `SET hvac1/target \"28\"`) || !strings.Contains(lines[0], `SET hvac1/target \"29\"`) {
		t.Fatalf("want one log line with the event and both writes, got %q", lines)
	}
	if s := e.ruleStatus("thermostat.lua"); s.Hash != old || !strings.Contains(s.LastError, "canary refused") {
		t.Fatalf("status %+v: want the old hash %s and the refusal as last error", s, old)
	}
	e.waitValue("hvac1/target", "28")
	e.set("thermostat1/setPoint", "35")
	waitFor(t, "setPoint clamped by the old version", func() bool {
		v, _ := e.get("thermostat1/setPoint")
		return v == "28"
	})
	got := notifiedBefore(t, e, watcher, "sentinel")
	for _, n := range got {
		if !strings.Contains(n, `"28"`) {
			t.Fatalf("a write other than the old version's reached the store: %q", got)
		}
	}
	if len(got) != 2 {
		t.Fatalf("want the two writes of the old version (29 and 35 clamped to 28), got %q", got)
	}
}

// thermostatSource is the example thermostat rule.
func thermostatSource(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "examples", "thermostat", "thermostat.lua"))
	if err != nil {
		t.Fatal(err)
	}
	return src
}

// A new version of the thermostat that only words its log line otherwise
// writes what the live one writes, clamped set points included: it takes
// over after its window of 3 events, and the 4th is handled by it alone.
func TestCanaryPromotesThermostat(t *testing.T) {
	e := newE2E(t, sandbox{kind: "lua"}, withCanary("thermostat.lua", Canary{Events: 3}))
	v1 := thermostatSource(t)
	v2 := variant(t, v1, `"set point %s clamped to %s"`, `"clamped %s to %s"`)
	e.loadRule("thermostat.lua", v1)
	old := e.ruleStatus("thermostat.lua").Hash
	e.loadRule("thermostat.lua", v2)
	for i, sp := range []string{"20", "40", "10"} {
		e.set("thermostat1/setPoint", sp)
		want := map[string]string{"20": "20", "40": "28", "10": "16"}[sp]
		e.waitValue("hvac1/target", want)
		waitFor(t, fmt.Sprint("event ", i+1, " handled"), func() bool { return e.ruleStatus("thermostat.lua").Handled == uint64(i+1) })
	}
	waitFor(t, "the new version live", func() bool {
		s := e.ruleStatus("thermostat.lua")
		return s.State == StateRunning && s.Hash != old
	})
	e.set("thermostat1/setPoint", "50")
	e.waitValue("hvac1/target", "28")
	waitFor(t, "logged by the new version", func() bool { return len(e.logLines("clamped 50 to 28")) == 1 })
	if n := len(e.logLines("canary refused")); n != 0 {
		t.Fatalf("%d refusals", n)
	}
}

// A version that writes what the live one writes takes over after its
// window (5 events) in the middle of a stream of 20: every event is handled
// exactly once by the live side (v1 for the first 1+5, v2 for the rest), the
// shadow saw the 5 of its window, and v2 alone handles what comes after.
// Each event n is recorded with SET seen/n NX, and a second handling would
// mark dup/n.
func TestCanaryPromotesMatchingVersionExactlyOnce(t *testing.T) {
	const window, stream = 5, 20
	e := newEnv(t, withCanary("stream.gorule", Canary{Events: window}))
	var calls [2]atomic.Int64
	version := func(i int) goRule {
		return goRule{
			init: watchInit("in"),
			handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
				calls[i].Add(1)
				_, err := h.Set(ctx, "seen/"+string(ev.Value), []byte("1"), abi.SetOptions{Cond: abi.CondNX})
				if abi.StatusOf(err) == abi.StatusNotApplied {
					_, err = h.Set(ctx, "dup/"+string(ev.Value), []byte("1"), abi.SetOptions{})
				}
				return err
			},
		}
	}
	e.loadVersion("stream", "v1", version(0))
	e.set("in", "0")
	e.waitValue("seen/0", "1")
	old := e.status("stream").Hash
	e.loadVersion("stream", "v2", version(1))
	if s := e.status("stream"); s.State != StateCanary {
		t.Fatalf("state %q, want %q", s.State, StateCanary)
	}
	for i := 1; i <= stream; i++ {
		e.set("in", fmt.Sprint(i))
	}
	waitFor(t, "every event handled", func() bool { return e.status("stream").Handled == 1+stream })
	s := e.status("stream")
	if s.State != StateRunning || s.Hash == old {
		t.Fatalf("after the window: state %q hash %s, want the new version running", s.State, s.Hash)
	}
	if v1, v2 := calls[0].Load(), calls[1].Load(); v1 != 1+window || v2 != stream {
		t.Fatalf("calls: v1 %d (want %d: 1 before, %d in the window), v2 %d (want %d: %d in shadow, %d live)",
			v1, 1+window, window, v2, stream, window, stream-window)
	}
	for i := 0; i <= stream; i++ {
		if v, ok := e.get(fmt.Sprint("seen/", i)); !ok || v != "1" {
			t.Fatalf("event %d lost", i)
		}
		if _, ok := e.get(fmt.Sprint("dup/", i)); ok {
			t.Fatalf("event %d handled twice", i)
		}
	}
	e.set("in", "after")
	e.waitValue("seen/after", "1")
	waitFor(t, "v2 handles events after the swap", func() bool { return calls[1].Load() == stream+1 })
	if calls[0].Load() != 1+window {
		t.Fatalf("v1 handled an event after the swap: %d calls", calls[0].Load())
	}
	if lines := e.logLines("canary passed", "rule=stream.gorule", "events=5"); len(lines) != 1 {
		t.Fatalf("want one 'canary passed' line, got %q in\n%s", lines, e.logs.String())
	}
}

// The shadow never reaches the store: its writes, its lock and its timer
// are staged or dropped. Its extra write makes it differ at the first
// event; a watcher on every key it touches is notified only of the live
// version's write.
func TestCanaryShadowWritesNothing(t *testing.T) {
	e := newEnv(t, withCanary("shadow.gorule", Canary{Events: 3}))
	watcher := watchKeys(t, e, "out", "extra", "lk", "sentinel")
	write := func(ctx context.Context, h abi.Host, ev abi.Event, keys ...string) error {
		for _, k := range keys {
			if _, err := h.Set(ctx, k, ev.Value, abi.SetOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
	e.loadVersion("shadow", "v1", goRule{init: watchInit("in"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		return write(ctx, h, ev, "out")
	}})
	var fenced atomic.Value
	e.loadVersion("shadow", "v2", goRule{
		init: func(ctx context.Context, h abi.Host) error {
			if err := h.Watch(ctx, "in", abi.WatchOptions{}); err != nil {
				return err
			}
			if _, err := h.Lock(ctx, "lk", 10*time.Second, abi.LockOptions{}); err != nil {
				return err
			}
			return h.Timer(ctx, "t", time.Millisecond, abi.TimerOptions{})
		},
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			// its lock holds across events, in its layer
			_, err := h.Set(ctx, "out", ev.Value, abi.SetOptions{Fence: "lk"})
			fenced.Store(fmt.Sprint(err))
			if err != nil {
				return err
			}
			return write(ctx, h, ev, "extra")
		},
	})
	e.set("in", "a")
	waitFor(t, "canary refused", func() bool { return e.status("shadow").State == StateCanaryRefused })
	if f := fenced.Load(); f != "<nil>" {
		t.Fatalf("the shadow's fenced write failed: %v", f)
	}
	got := notifiedBefore(t, e, watcher, "sentinel")
	if !slices.Equal(got, []string{`SET out="a"`}) {
		t.Fatalf("notified of %q, want only the live version's SET out", got)
	}
	if s := e.status("shadow"); s.Timers != 0 {
		t.Fatalf("the shadow armed %d timer(s)", s.Timers)
	}
	if lines := e.logLines("canary refused", `shadow="[SET out \"a\" SET extra \"a\"]"`, `live="[SET out \"a\"]"`); len(lines) != 1 {
		t.Fatalf("want the diff in the log, got\n%s", e.logs.String())
	}
}

// A window bounded by duration ends without events: the new version goes
// live, and handles the next event.
func TestCanaryDurationEndsWindowWithoutEvents(t *testing.T) {
	e := newEnv(t, withCanary("quiet.gorule", Canary{Duration: 50 * time.Millisecond, Events: 1000}))
	rule := func(tag string) goRule {
		return goRule{init: watchInit("in"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			_, err := h.Set(ctx, "out", []byte(tag), abi.SetOptions{})
			return err
		}}
	}
	e.loadVersion("quiet", "v1", rule("v1"))
	old := e.status("quiet").Hash
	e.loadVersion("quiet", "v2", rule("v2"))
	waitFor(t, "the new version live", func() bool {
		s := e.status("quiet")
		return s.State == StateRunning && s.Hash != old
	})
	e.set("in", "x")
	e.waitValue("out", "v2")
}

// Loading the version already in shadow again does not restart its window.
func TestCanarySameVersionTwiceKeepsShadow(t *testing.T) {
	e := newEnv(t, withCanary("twice.gorule", Canary{Events: 2}))
	var starts atomic.Int64
	r := goRule{init: func(ctx context.Context, h abi.Host) error {
		starts.Add(1)
		return h.Watch(ctx, "in", abi.WatchOptions{})
	},
		handle: func(context.Context, abi.Host, abi.Event) error { return nil }}
	e.loadVersion("twice", "v1", r)
	e.loadVersion("twice", "v2", r)
	e.loadVersion("twice", "v2", r)
	if n := starts.Load(); n != 2 {
		t.Fatalf("%d starts, want 2 (v1, and v2 once)", n)
	}
	if e.status("twice").State != StateCanary {
		t.Fatal("not in canary")
	}
}

// Writes match on op, key and value, in order; numbers within the
// tolerance; ignored keys are left out on both sides.
func TestCanaryCompare(t *testing.T) {
	set := func(k, v string) staging.Write { return staging.Write{Op: "SET", Key: k, Value: []byte(v)} }
	for _, tc := range []struct {
		name         string
		cfg          Canary
		live, shadow []staging.Write
		differ       bool
	}{
		{"same", Canary{}, []staging.Write{set("a", "1"), {Op: "DEL", Key: "b"}}, []staging.Write{set("a", "1"), {Op: "DEL", Key: "b"}}, false},
		{"value", Canary{}, []staging.Write{set("a", "28")}, []staging.Write{set("a", "29")}, true},
		{"within tolerance", Canary{Tolerance: 0.5}, []staging.Write{set("a", "28")}, []staging.Write{set("a", "28.4")}, false},
		{"beyond tolerance", Canary{Tolerance: 0.5}, []staging.Write{set("a", "28")}, []staging.Write{set("a", "28.6")}, true},
		{"not numbers", Canary{Tolerance: 0.5}, []staging.Write{set("a", "x")}, []staging.Write{set("a", "y")}, true},
		{"order", Canary{}, []staging.Write{set("a", "1"), set("b", "1")}, []staging.Write{set("b", "1"), set("a", "1")}, true},
		{"op", Canary{}, []staging.Write{set("a", "1")}, []staging.Write{{Op: "VDEL", Key: "a", Value: []byte("1")}}, true},
		{"missing", Canary{}, []staging.Write{set("a", "1")}, nil, true},
		{"ignored", Canary{Ignore: []string{"stats/*"}}, []staging.Write{set("stats/n", "1"), set("a", "1")}, []staging.Write{set("a", "1"), set("stats/n", "2")}, false},
	} {
		c := &canary{cfg: tc.cfg, liveWs: tc.live, shadowWs: tc.shadow}
		if _, _, d := c.differs(); d != tc.differ {
			t.Errorf("%s: differs = %v, want %v", tc.name, d, tc.differ)
		}
	}
}

// Saving the live version again while a canary runs (an edit undone)
// drops the shadow, and clears a refusal.
func TestCanaryRevertDropsShadow(t *testing.T) {
	e := newEnv(t, withCanary("rev.gorule", Canary{Events: 3}))
	var v2calls atomic.Int64
	rule := func(tag string, calls *atomic.Int64) goRule {
		return goRule{init: watchInit("in"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if calls != nil {
				calls.Add(1)
			}
			_, err := h.Set(ctx, "out", []byte(tag), abi.SetOptions{})
			return err
		}}
	}
	e.loadVersion("rev", "v1", rule("v1", nil))
	e.loadVersion("rev", "v2", rule("v2", &v2calls))
	if s := e.status("rev"); s.State != StateCanary {
		t.Fatalf("state %q, want %q", s.State, StateCanary)
	}
	e.loadVersion("rev", "v1", rule("v1", nil))
	if s := e.status("rev"); s.State != StateRunning {
		t.Fatalf("after the revert: state %q, want %q", s.State, StateRunning)
	}
	e.set("in", "x")
	e.waitValue("out", "v1")
	waitFor(t, "handled", func() bool { return e.status("rev").Handled == 1 })
	if n := v2calls.Load(); n != 0 {
		t.Fatalf("the dropped shadow handled %d event(s)", n)
	}
	e.loadVersion("rev", "v2", rule("v2", &v2calls))
	e.set("in", "y")
	waitFor(t, "refused", func() bool { return e.status("rev").State == StateCanaryRefused })
	e.loadVersion("rev", "v1", rule("v1", nil))
	if s := e.status("rev"); s.State != StateRunning {
		t.Fatalf("after the second revert: state %q, want %q", s.State, StateRunning)
	}
}
