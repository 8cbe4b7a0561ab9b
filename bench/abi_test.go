package bench

import (
	"context"
	"testing"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// loopFloor times n bare host calls of sub's engine: for Lua a call of a
// Go builtin (rawequal) from a Lua loop, for WebAssembly the Go guest
// calling the last_error host function with an empty buffer (the same floor
// as runtime/wasm's BenchmarkVerbs), for the plugin n bare gRPC unary calls
// (go-plugin's health check) on the floor plugin.
func loopFloor(tb testing.TB, sub subject, floor goplugin.ClientProtocol, n int) time.Duration {
	tb.Helper()
	t0 := time.Now()
	if sub.name == "plugin" {
		for range n {
			if err := floor.Ping(); err != nil {
				tb.Fatal(err)
			}
		}
		return time.Since(t0)
	}
	if err := sub.s.Handle(context.Background(), verbEvent("floor", n)); err != nil {
		tb.Fatal(err)
	}
	return time.Since(t0)
}

// BenchmarkVerbs is the cost of each ABI verb called from a Lua rule, a Go
// WebAssembly rule, an AssemblyScript WebAssembly rule and a native
// plugin, side by side in one run, against the in-memory abitest store (no
// broker). Each sub-benchmark <verb>/<rt> calls the verb b.N times in
// events of 256 calls and, just before each, times as many calls of its
// engine's floor (see loopFloor; the plugin's is a bare gRPC unary call,
// kept as the yardstick of earlier measurements: a plugin's host calls now
// travel on its session's raw channel, cheaper than any gRPC call, so the
// plugin's x-floor is below 1; not timed in ns/op). floor-ns and x-floor come from the fastest event of
// each, the pair least disturbed by other processes on a shared machine.
// The calls and their outcomes are the same in every runtime (see
// testdata/wasmrule/verbs.go).
func BenchmarkVerbs(b *testing.B) {
	const chunk = 256
	subs := startSubjects(b)
	floor := startFloor(b)
	for _, verb := range abi.Verbs() {
		for _, sub := range subs {
			b.Run(verb+"/"+sub.name, func(b *testing.B) {
				full := min(chunk, b.N)
				var fastFloor, fastVerb time.Duration // of the events of full calls
				for done := 0; done < b.N; done += chunk {
					n := min(chunk, b.N-done)
					b.StopTimer()
					f := loopFloor(b, sub, floor, n)
					b.StartTimer()
					t0 := time.Now()
					if err := sub.s.Handle(context.Background(), verbEvent(verb, n)); err != nil {
						b.Fatal(err)
					}
					if d := time.Since(t0); n == full {
						if fastFloor == 0 || f < fastFloor {
							fastFloor = f
						}
						if fastVerb == 0 || d < fastVerb {
							fastVerb = d
						}
					}
				}
				b.ReportMetric(float64(fastFloor.Nanoseconds())/float64(full), "floor-ns")
				b.ReportMetric(float64(fastVerb)/float64(fastFloor), "x-floor")
			})
		}
	}
}

// nativeSubject is the baseline of the event round trip: the native Go
// rule's Script (a function call under the call deadline).
func nativeSubject(tb testing.TB) subject {
	tb.Helper()
	store := abitest.New()
	p, err := nativeRuntime{}.Compile(context.Background(), "rule.native", []byte("A"))
	if err != nil {
		tb.Fatal(err)
	}
	s, err := p.Start(context.Background(), store, abi.Limits{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = s.Close(context.Background()) })
	return subject{name: "native", store: store, s: s}
}

// BenchmarkHandle is the event-to-handler round trip: Script.Handle of a
// trivial event (the rule returns at once) in each runtime, next to the
// native Go rule (a function call under the same call deadline) and, for
// the plugin, a bare gRPC unary call. They run in turn in chunks of 256 so
// that all see the same load; one op is one event of each. Reports
// <rt>-ns per event, <rt>-x-native, and plugin-x-grpc.
func BenchmarkHandle(b *testing.B) {
	const chunk = 256
	subs := append([]subject{nativeSubject(b)}, startSubjects(b)...)
	floor := startFloor(b)
	ctx := context.Background()
	for _, sub := range subs { // warm up
		if err := sub.s.Handle(ctx, noopEvent); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := make([]time.Duration, len(subs))
	var grpc time.Duration
	b.ResetTimer()
	for done := 0; done < b.N; done += chunk {
		n := min(chunk, b.N-done)
		for i, sub := range subs {
			t0 := time.Now()
			for range n {
				if err := sub.s.Handle(ctx, noopEvent); err != nil {
					b.Fatal(err)
				}
			}
			elapsed[i] += time.Since(t0)
		}
		t0 := time.Now()
		for range n {
			if err := floor.Ping(); err != nil {
				b.Fatal(err)
			}
		}
		grpc += time.Since(t0)
	}
	b.StopTimer()
	per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
	for i, sub := range subs {
		b.ReportMetric(per(elapsed[i]), sub.name+"-ns")
		if i > 0 {
			b.ReportMetric(per(elapsed[i])/per(elapsed[0]), sub.name+"-x-native")
		}
	}
	b.ReportMetric(per(grpc), "grpc-ns")
	for i, sub := range subs {
		if sub.name == "plugin" {
			b.ReportMetric(per(elapsed[i])/per(grpc), "plugin-x-grpc")
		}
	}
}
