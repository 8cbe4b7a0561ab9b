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

// funcRuntime runs rules that are Go functions of this file, registered by
// name: a file "*.func" holds the name of its rule. The pattern benchmarks
// use it to time what a rule sees, in the rule.
type funcRuntime struct {
	mu    sync.Mutex
	rules map[string]funcRule
}

type funcRule struct {
	init   func(ctx context.Context, h abi.Host) error
	handle func(ctx context.Context, h abi.Host, ev abi.Event) error
}

func (rt *funcRuntime) Kind() string { return "func" }

func (rt *funcRuntime) add(name string, r funcRule) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.rules == nil {
		rt.rules = map[string]funcRule{}
	}
	rt.rules[name] = r
}

func (rt *funcRuntime) Compile(_ context.Context, file string, src []byte) (abi.Program, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	r, ok := rt.rules[strings.TrimSpace(string(src))]
	if !ok {
		return nil, &abi.CompileError{File: file, Line: 1, Msg: "no such rule"}
	}
	return r, nil
}

func (rt *funcRuntime) Close(context.Context) error { return nil }

func (r funcRule) Start(ctx context.Context, h abi.Host, lim abi.Limits) (abi.Script, error) {
	if r.init != nil {
		if err := r.init(ctx, h); err != nil {
			return nil, err
		}
	}
	return funcScript{r: r, h: h}, nil
}

type funcScript struct {
	r funcRule
	h abi.Host
}

func (s funcScript) Handle(ctx context.Context, ev abi.Event) error {
	if s.r.handle == nil {
		return nil
	}
	return s.r.handle(ctx, s.h, ev)
}

func (funcScript) Close(context.Context) error { return nil }

// newFuncEnv is an env whose host also runs rt's rules.
func newFuncEnv(tb testing.TB, rt *funcRuntime, defaults host.RuleConfig) *env {
	return newEnv(tb, defaults, func(c *host.Config) { c.Runtimes = append(c.Runtimes, rt) })
}

// loadFunc registers r as name and loads it.
func (e *env) loadFunc(rt *funcRuntime, name string, r funcRule) string {
	e.tb.Helper()
	rt.add(name, r)
	return e.load(name+".func", []byte(name), false)
}

// patternKeys is how many keys the pattern and exact watches of
// BenchmarkPatternEvents cover.
const patternKeys = 10_000

func patternKey(prefix string, i int) string { return fmt.Sprintf("%s/%05d", prefix, i%patternKeys) }

// BenchmarkPatternEvents is the event rate of a rule whose pattern watch
// covers 10,000 keys, against a rule watching the same number of keys
// exactly (the BASELINE), in one host: a user client SETs the keys in
// turn with 64 requests in flight and the rule handles each event (it does
// nothing else, so the host's part is all there is to compare). Subjects
// run in turn in chunks of 500 events, the order rotating each round.
// Reports exact-ev/s, pattern-ev/s and pattern-x-base (target: >= 0.95).
func BenchmarkPatternEvents(b *testing.B) {
	const chunk, inflight = 500, 64
	rt := &funcRuntime{}
	e := newFuncEnv(b, rt, host.RuleConfig{Mailbox: 1 << 16, MaxWatchedKeys: patternKeys})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	testutil.InFlight(b, inflight, 2*patternKeys, func(_, i int) error {
		prefix := []string{"pe", "pp"}[i%2]
		_, err := e.hostC.Set(ctx, []byte(patternKey(prefix, i/2)), []byte("0"), protocol.SetOptions{})
		return err
	})
	exact := e.loadFunc(rt, "exact", funcRule{init: func(ctx context.Context, h abi.Host) error {
		for i := range patternKeys {
			if err := h.Watch(ctx, patternKey("pe", i), abi.WatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	}})
	pattern := e.loadFunc(rt, "pattern", funcRule{init: func(ctx context.Context, h abi.Host) error {
		return h.WatchPattern(ctx, "pp/*", abi.WatchOptions{})
	}})
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
	elapsed := make([]time.Duration, len(flows))
	b.ResetTimer()
	for round, done := 0, 0; done < b.N; round, done = round+1, done+chunk {
		n := min(chunk, b.N-done)
		for k := range flows {
			i := (round + k) % len(flows)
			elapsed[i] += drive(flows[i], n)
		}
	}
	b.StopTimer()
	testutil.ReportRates(b, elapsed, func(i int) string { return flows[i].name }, "-ev/s", "-x-base")
	e.checkClean()
}

// BenchmarkPatternDiscovery is how long a key created after a pattern's
// first scan takes to reach the rule watching it: written by a user
// client, with a rescan every 100 ms (bound: the rescan plus a round
// trip; outside-mean-ms, outside-max-ms against bound-ms), and written by
// another rule of the same host, found at once (rule-us, from the
// writer's SET returning to the watcher's handler, against rtt-us, the
// mean round trip of a GET on the host's connection).
func BenchmarkPatternDiscovery(b *testing.B) {
	const rescan = 100 * time.Millisecond
	rt := &funcRuntime{}
	e := newFuncEnv(b, rt, host.RuleConfig{Rescan: rescan})
	var mu sync.Mutex
	seen := map[string]time.Time{}
	wrote := map[string]time.Time{}
	e.loadFunc(rt, "watcher", funcRule{
		init: func(ctx context.Context, h abi.Host) error { return h.WatchPattern(ctx, "pd/*", abi.WatchOptions{}) },
		handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
			mu.Lock()
			seen[ev.Key] = time.Now()
			mu.Unlock()
			return nil
		},
	})
	e.loadFunc(rt, "writer", funcRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "pd-make", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			key := "pd/rule-" + string(ev.Value)
			_, err := h.Set(ctx, key, []byte("1"), abi.SetOptions{})
			mu.Lock()
			wrote[key] = time.Now()
			mu.Unlock()
			return err
		},
	})
	waitSeen := func(key string) time.Time {
		var at time.Time
		testutil.WaitFor(b, key+" seen", func() bool {
			mu.Lock()
			defer mu.Unlock()
			at = seen[key]
			return !at.IsZero()
		})
		return at
	}
	rtt := roundTrip(b, e.hostC)
	var outside, byRule []time.Duration
	b.ResetTimer()
	for i := range b.N {
		key := fmt.Sprintf("pd/user-%d", i)
		t0 := time.Now()
		e.set(key, "1")
		outside = append(outside, waitSeen(key).Sub(t0))

		e.set("pd-make", fmt.Sprint(i))
		at := waitSeen(fmt.Sprintf("pd/rule-%d", i))
		mu.Lock()
		byRule = append(byRule, at.Sub(wrote[fmt.Sprintf("pd/rule-%d", i)]))
		mu.Unlock()
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
// keys: a pattern watch and exact watches both handle their events.
func TestPatternBenchFixtures(t *testing.T) {
	rt := &funcRuntime{}
	e := newFuncEnv(t, rt, host.RuleConfig{})
	var mu sync.Mutex
	var got []string
	e.set("pp/00001", "0")
	e.loadFunc(rt, "pattern", funcRule{
		init: func(ctx context.Context, h abi.Host) error { return h.WatchPattern(ctx, "pp/*", abi.WatchOptions{}) },
		handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
			mu.Lock()
			got = append(got, ev.Key)
			mu.Unlock()
			return nil
		},
	})
	e.set("pp/00001", "1")
	testutil.WaitFor(t, "the pattern's two events", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 2 })
	e.checkClean()
}
