package bench

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// nativeClient is the baseline of end-to-end rule throughput: the same rule
// as a Go handler on its own protocol.Client, without the host. It
// registers KEYNOTIFY on go/in and, for each notification read from
// Events, GETs go/in and then SETs go/out to the value read.
type nativeClient struct {
	c       *protocol.Client
	handled atomic.Uint64
	failed  atomic.Uint64
}

func startNativeClient(tb testing.TB, addr string, log *slog.Logger) *nativeClient {
	tb.Helper()
	n := &nativeClient{c: dial(tb, addr, "native", log)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := n.c.KeyNotify(ctx, []byte("go/in"), protocol.CallOptions{}); err != nil {
		tb.Fatalf("keynotify go/in: %v", err)
	}
	onNotify(tb, n.c, n.handle)
	return n
}

func (n *nativeClient) handle(ctx context.Context, ev protocol.Event) {
	if string(ev.Key) != "go/in" {
		return
	}
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := n.c.Get(callCtx, []byte("go/in"), protocol.CallOptions{})
	if err == nil {
		_, err = n.c.Set(callCtx, []byte("go/out"), res.Value, protocol.SetOptions{})
	}
	if err != nil {
		n.failed.Add(1)
		return
	}
	n.handled.Add(1)
}

// flow is one way of running the copy rule: SETs of in are handled by
// copying in to out, and handled counts the completed handlings.
type flow struct {
	name, in, out string
	handled       func() uint64
}

// hostFlows loads the copy rule of each runtime into e (native Go rule,
// Lua, Go WebAssembly guest, plugin, and the plugin's copy whose SET goes
// with the event's end) and returns their flows.
func (e *env) hostFlows() []flow {
	e.tb.Helper()
	handled := func(path string) func() uint64 {
		return func() uint64 { return e.status(path).Handled }
	}
	plugin := handled(e.load("pluginrule", readFile(e.tb, pluginRule(e.tb)), true))
	return onlyFlows(e.tb, os.Getenv("SSRUN_BENCH_FLOWS"), []flow{
		{"host-native", "native/in", "native/out", handled(e.load("rule.native", []byte("A"), false))},
		{"lua", "lua/in", "lua/out", handled(e.load("rule.lua", luaRule(e.tb, "A"), false))},
		{"wasm", "wasm/in", "wasm/out", handled(e.load("rule.wasm", wasmGuest(e.tb, "A"), false))},
		{"plugin", "plugin/in", "plugin/out", plugin},
		pluginAtEndFlow(plugin),
	})
}

// roundTrip returns the mean time of 100 GETs on c, one at a time.
func roundTrip(tb testing.TB, c *protocol.Client) time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	t0 := time.Now()
	for range 100 {
		if _, err := c.Get(ctx, []byte("go/in"), protocol.CallOptions{}); err != nil {
			tb.Fatal(err)
		}
	}
	return time.Since(t0) / 100
}

// rotate is the timed part of a throughput benchmark: b.N events of each
// flow, driven in chunks by drive (rotateChunks); it reports each flow's
// events per second (<name>-ev/s) and its ratio to the first flow's
// (<name>-x-base).
func rotate(b *testing.B, flows []flow, chunk int, drive func(f flow, n int) time.Duration) {
	elapsed := rotateChunks(b, flows, chunk, drive, nil)
	testutil.ReportRates(b, elapsed, func(i int) string { return flows[i].name }, "-ev/s", "-x-base")
}

// rotateChunks drives b.N events of each flow in chunks by drive, the
// flows in turn and their order rotating each round so that all see the
// same machine load, and returns the time each took; between, when not
// nil, runs after each round, outside the timing.
func rotateChunks(b *testing.B, flows []flow, chunk int, drive func(f flow, n int) time.Duration, between func()) []time.Duration {
	elapsed := make([]time.Duration, len(flows))
	b.ResetTimer()
	for round, done := 0, 0; done < b.N; round, done = round+1, done+chunk {
		n := min(chunk, b.N-done)
		for k := range flows {
			i := (round + k) % len(flows)
			elapsed[i] += drive(flows[i], n)
		}
		if between != nil {
			b.StopTimer()
			between()
			b.StartTimer()
		}
	}
	b.StopTimer()
	return elapsed
}

// onlyFlows returns the flows named in names (comma-separated; all when
// empty): SSRUN_BENCH_FLOWS=plugin-atend keeps a benchmark to the baseline
// and that subject, to profile one (e.g. perf record -p of the plugin
// process) with nothing else running. An unknown name is an error.
func onlyFlows(tb testing.TB, names string, all []flow) []flow {
	tb.Helper()
	if names == "" {
		return all
	}
	var out []flow
	for name := range strings.SplitSeq(names, ",") {
		i := slices.IndexFunc(all, func(f flow) bool { return f.name == name })
		if i < 0 {
			tb.Fatalf("SSRUN_BENCH_FLOWS: no flow %q", name)
		}
		out = append(out, all[i])
	}
	return out
}

// drive SETs f.in n times from the user client with up to inflight
// requests in flight (values "0".."n-1") and returns the time until f has
// handled all n.
func (e *env) drive(f flow, n, inflight int) time.Duration {
	e.tb.Helper()
	return e.driveKeys(f, func(int) string { return f.in }, n, inflight)
}

// driveKeys is drive whose i-th SET is of key(i).
func (e *env) driveKeys(f flow, key func(i int) string, n, inflight int) time.Duration {
	e.tb.Helper()
	before := f.handled()
	t0 := time.Now()
	testutil.InFlight(e.tb, inflight, n, func(_, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := e.user.Set(ctx, []byte(key(i)), []byte(strconv.Itoa(i)), protocol.SetOptions{}); err != nil {
			return fmt.Errorf("set %s: %w", key(i), err)
		}
		return nil
	})
	want := before + uint64(n)
	deadline := t0.Add(time.Minute)
	for f.handled() < want {
		if time.Now().After(deadline) {
			e.tb.Fatalf("%s: handled %d of %d events in a minute", f.name, f.handled()-before, n)
		}
		time.Sleep(250 * time.Microsecond)
	}
	return time.Since(t0)
}

// checkCopied fails the test unless f's out equals its in.
func (e *env) checkCopied(f flow) {
	e.tb.Helper()
	in, _ := e.get(f.in)
	if out, ok := e.get(f.out); !ok || out != in {
		e.tb.Errorf("%s: %s = %q (found %t), want %q as in %s", f.name, f.out, out, ok, in, f.in)
	}
}

// TestRulesEndToEnd runs every bench rule through the host on the embedded
// broker: a SET of its in key is copied to its out key, a trigger is tagged
// with the version that handled it, the small module handles an event, and
// nothing is dropped or fails. The native client baseline copies too.
func TestRulesEndToEnd(t *testing.T) {
	prebuild(t, "A")
	e := newEnv(t, host.RuleConfig{})
	native := startNativeClient(t, e.addr, e.log)
	flows := append(e.hostFlows(), flow{"baseline", "go/in", "go/out", native.handled.Load})
	small := e.load("small.wasm", smallRule("small/in"), false)
	for _, f := range flows {
		e.drive(f, 5, 2)
		e.checkCopied(f)
	}
	for _, prefix := range []string{"native", "lua", "wasm", "plugin"} {
		e.set(prefix+"/trigger", "7")
		testutil.WaitFor(t, prefix+"/tagged = A:7", func() bool {
			v, _ := e.get(prefix + "/tagged")
			return v == "A:7"
		})
	}
	e.set("small/in", "x")
	testutil.WaitFor(t, "the small module to handle small/in", func() bool { return e.status(small).Handled == 1 })
	e.checkClean()
	if native.failed.Load() != 0 {
		t.Errorf("baseline: %d handlings failed", native.failed.Load())
	}
}

// BenchmarkRuleThroughput is end-to-end rule throughput: a user client SETs
// a key with 64 requests in flight, the store notifies, and the rule GETs
// that key and SETs another to its value; the rate is completed handlings
// per second until all of a chunk's events are handled (counted by the
// host's RuleStatus.Handled, or the baseline's own counter). Subjects: the
// BASELINE (a Go handler on its own protocol.Client, no host), the host
// with a native Go rule, and the host with the Lua, Go WebAssembly and
// plugin rules. They run in turn in chunks of 500 events, the order
// rotating each round, so all see the same machine load; one op is one
// event of each subject. Reports <subject>-ev/s and <subject>-x-base
// (target for lua and wasm: >= 0.8). Mailboxes hold every event, and the
// benchmark fails if any event was dropped or failed.
func BenchmarkRuleThroughput(b *testing.B) { ruleThroughput(b, 0) }

// BenchmarkRuleThroughputLink is BenchmarkRuleThroughput with every
// connection to the broker through a link that holds each byte for at
// least 250 µs each way (testnet.Proxy; an idle Go process's timers wake
// in whole milliseconds, so it is more): each store call costs more, as
// with a broker on another node, while a plugin's messages on its own
// machine do not. Reports also get-us, a GET's round trip through the link
// (the baseline's client, before the chunks; about 185 µs without it).
func BenchmarkRuleThroughputLink(b *testing.B) { ruleThroughput(b, 250*time.Microsecond) }

// ruleThroughput runs BenchmarkRuleThroughput with every connection to the
// broker delayed by link each way (none when 0).
func ruleThroughput(b *testing.B, link time.Duration) {
	prebuild(b, "A")
	e := newEnvLink(b, host.RuleConfig{Mailbox: 1 << 16}, sharedWasmCache(b), link)
	native := startNativeClient(b, e.addr, e.log)
	flows := append([]flow{{"baseline", "go/in", "go/out", native.handled.Load}}, e.hostFlows()...)
	e.warmUp(flows)
	var rtt time.Duration
	if link > 0 {
		rtt = roundTrip(b, native.c)
	}
	elapsed := e.rotate(b, flows, nil)
	testutil.ReportRates(b, elapsed, func(i int) string { return flows[i].name }, "-ev/s", "-x-base")
	if link > 0 {
		b.ReportMetric(float64(rtt.Microseconds()), "get-us")
	}
	for _, f := range flows {
		e.checkCopied(f)
	}
	e.checkClean()
	if st := native.c.Stats(); native.failed.Load() != 0 || st.EventsDropped != 0 {
		b.Errorf("baseline: %d handlings failed, %d events dropped", native.failed.Load(), st.EventsDropped)
	}
}
