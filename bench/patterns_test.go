package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// patternKeys is how many keys the pattern and exact watches of
// BenchmarkPatternEvents cover.
const patternKeys = 10_000

func patternKey(prefix string, i int) string { return fmt.Sprintf("%s/%05d", prefix, i%patternKeys) }

// exactRule is a Lua rule watching the keys pe/00000..pe/09999 exactly;
// patternRule one watching them through a pattern. Both only handle.
const (
	exactRule = `local ss = require("ssrun")
for i = 0, 9999 do assert(ss.watch(string.format("pe/%05d", i))) end
function on_event(ev) end`
	patternRule = `local ss = require("ssrun")
assert(ss.watch_pattern("pp/*"))
function on_event(ev) end`
)

// BenchmarkPatternEvents is the event rate of a Lua rule whose pattern
// watch covers 10,000 keys, against a Lua rule watching as many keys
// exactly (the BASELINE), in one host: a user client SETs the keys in turn
// with 64 requests in flight and the rule handles each event (doing
// nothing else). Subjects run in turn in chunks of 500 events, the order
// rotating each round. Reports exact-ev/s, pattern-ev/s and pattern-x-base
// (target: >= 0.95).
func BenchmarkPatternEvents(b *testing.B) {
	const chunk, inflight = 500, 64
	e := newEnv(b, host.RuleConfig{Mailbox: 1 << 16, MaxWatchedKeys: patternKeys, Timeout: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	testutil.InFlight(b, inflight, 2*patternKeys, func(_, i int) error {
		prefix := []string{"pe", "pp"}[i%2]
		_, err := e.hostC.Set(ctx, []byte(patternKey(prefix, i/2)), []byte("0"), protocol.SetOptions{})
		return err
	})
	exact := e.load("exact.lua", []byte(exactRule), false)
	pattern := e.load("pattern.lua", []byte(patternRule), false)
	testutil.WaitFor(b, "the pattern's 10,000 keys", func() bool { return e.status(pattern).Handled == patternKeys })
	if n := e.status(pattern).PatternKeys; n != patternKeys {
		b.Fatalf("the pattern covers %d keys, want %d", n, patternKeys)
	}
	handled := func(path string) func() uint64 { return func() uint64 { return e.status(path).Handled } }
	flows := []flow{{name: "exact", in: "pe", handled: handled(exact)}, {name: "pattern", in: "pp", handled: handled(pattern)}}
	drive := func(f flow, n int) time.Duration {
		return e.driveKeys(f, func(i int) string { return patternKey(f.in, i) }, n, inflight)
	}
	for _, f := range flows { // warm up
		drive(f, 200)
	}
	rotate(b, flows, chunk, drive)
	e.checkClean()
}

// clocked is a host.Recorder that notes when each event reaches a rule's
// handler and when each of a rule's sets returned, by key.
type clocked struct {
	mu            sync.Mutex
	handled, sets map[string]time.Time
}

func (c *clocked) RecordEvent(_ string, _ int64, ev abi.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.handled[ev.Key]; !ok {
		c.handled[ev.Key] = time.Now()
	}
}

func (c *clocked) RecordCall(_ string, _ int64, call host.Call) {
	if call.Verb == "set" {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sets[call.Key] = time.Now()
	}
}

func (c *clocked) RecordConnection(int64, bool) {}

// at returns when key's event was handled and when a rule set it (zero
// when not yet).
func (c *clocked) at(key string) (handled, set time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handled[key], c.sets[key]
}

// BenchmarkPatternDiscovery is how long a key created after a pattern's
// first scan takes to reach the Lua rule watching it: written by a user
// client, with a rescan every 100 ms (bound: the rescan plus a round
// trip; outside-mean-ms, outside-max-ms against bound-ms), and written by
// another Lua rule of the same host, found at once (rule-us, from the
// writer's set returning to the watcher's handler, against rtt-us, the
// mean round trip of a GET on the host's connection).
func BenchmarkPatternDiscovery(b *testing.B) {
	const rescan = 100 * time.Millisecond
	rec := &clocked{handled: map[string]time.Time{}, sets: map[string]time.Time{}}
	e := newEnv(b, host.RuleConfig{Rescan: rescan}, func(c *host.Config) { c.Recorder = rec })
	e.load("watcher.lua", []byte(`local ss = require("ssrun")
assert(ss.watch_pattern("pd/*"))
function on_event(ev) end`), false)
	e.load("writer.lua", []byte(`local ss = require("ssrun")
assert(ss.watch("pd-make"))
function on_event(ev) assert(ss.set("pd/rule-" .. ev.value, "1")) end`), false)
	waitHandled := func(key string) time.Time {
		var at time.Time
		testutil.WaitFor(b, key+" handled", func() bool { at, _ = rec.at(key); return !at.IsZero() })
		return at
	}
	rtt := roundTrip(b, e.hostC)
	var outside, byRule []time.Duration
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("pd/user-%d", i)
		t0 := time.Now()
		e.set(key, "1")
		outside = append(outside, waitHandled(key).Sub(t0))

		key = fmt.Sprintf("pd/rule-%d", i)
		e.set("pd-make", fmt.Sprint(i))
		at := waitHandled(key)
		_, set := rec.at(key)
		byRule = append(byRule, at.Sub(set))
	}
	b.StopTimer()
	mean := func(ds []time.Duration) time.Duration {
		var sum time.Duration
		for _, d := range ds {
			sum += d
		}
		return sum / time.Duration(len(ds))
	}
	b.ReportMetric(float64(mean(outside).Microseconds())/1000, "outside-mean-ms")
	b.ReportMetric(float64(slices.Max(outside).Microseconds())/1000, "outside-max-ms")
	b.ReportMetric(float64((rescan+rtt).Microseconds())/1000, "bound-ms")
	b.ReportMetric(float64(mean(byRule).Microseconds()), "rule-us")
	b.ReportMetric(float64(rtt.Microseconds()), "rtt-us")
	b.ReportMetric(float64(mean(byRule))/float64(rtt), "rule-x-rtt")
	e.checkClean()
}

// TestPatternBenchFixtures checks the pattern benchmarks' rules on a few
// keys: the pattern rule and the exact one (on 10 keys) load and handle
// their keys' events.
func TestPatternBenchFixtures(t *testing.T) {
	e := newEnv(t, host.RuleConfig{Timeout: time.Minute})
	e.set("pp/00001", "0")
	exact := e.load("exact.lua", []byte(strings.Replace(exactRule, "9999", "9", 1)), false)
	pattern := e.load("pattern.lua", []byte(patternRule), false)
	e.set("pp/00001", "1")
	e.set("pe/00009", "1")
	testutil.WaitFor(t, "the pattern's two events and the exact one", func() bool {
		return e.status(pattern).Handled == 2 && e.status(exact).Handled == 1
	})
	if n := e.status(exact).Watches; len(n) != 10 {
		t.Errorf("the exact rule watches %d keys", len(n))
	}
	e.checkClean()
}
