package assemblyscript

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// baselineEnv names a baseline build of the test rule (e.g. main's
// testdata/verbs.wasm) for BenchmarkVerbs to run interleaved with this one.
const baselineEnv = "SSRUN_AS_BASELINE_WASM"

// benchHost is abitest.Host with Log dropped: abitest keeps every line,
// which would grow without bound over millions of calls.
type benchHost struct{ *abitest.Host }

func (benchHost) Log(int32, string) {}

// benchChunk is the number of calls in one timed event.
const benchChunk = 256

// benchVerbs are the rows of BenchmarkVerbs: the loops of package bench's
// BenchmarkVerbs (testdata/bench.ts), with their outcomes there (del,
// vdel, unwatch, unlock and cancel fail with NOT_FOUND or NOT_APPLIED).
var benchVerbs = []string{"get", "set", "del", "vdel", "watch", "unwatch", "lock", "unlock", "log", "timer", "cancel", "now", "raw-get", "alloc", "text"}

// BenchmarkVerbs times each verb of the AssemblyScript SDK as package
// bench's BenchmarkVerbs does (the test rule's "verb" command, events of
// 256 calls, x-floor against a bare last_error call with an empty buffer
// timed just before), and, when $SSRUN_AS_BASELINE_WASM names a baseline
// build of the test rule, the baseline in turn with it, chunk by chunk, so
// that both see the same load:
//
//	git -C ../../.. show main:abi/guest/assemblyscript/testdata/verbs.wasm >/tmp/as-main.wasm
//	SSRUN_AS_BASELINE_WASM=/tmp/as-main.wasm go test -run '^$' -bench '^BenchmarkVerbs$' -benchtime 200x -count 3 .
//
// Each time is the fastest chunk, the one least disturbed by other
// processes on a shared machine (ns/op, the whole loop over b.N, means
// nothing). Reports ns/call, floor-ns and x-floor (this build's verb over
// its own floor), the same of the baseline prefixed base-, and x-base:
// this build's time per call over the baseline's (x-floors of two builds
// need not share a floor: testdata/bench.ts's floor loop changed).
func BenchmarkVerbs(b *testing.B) {
	subs := []abi.Script{benchScript(b, program(b))}
	if path := os.Getenv(baselineEnv); path != "" {
		src, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		p, err := shared.rt.Compile(context.Background(), "baseline.wasm", src)
		if err != nil {
			b.Fatalf("compile the baseline %s: %v", path, err)
		}
		subs = append(subs, benchScript(b, p))
	}
	for _, verb := range benchVerbs {
		b.Run(verb, func(b *testing.B) {
			for _, s := range subs { // warm up
				benchLoop(b, s, "floor", benchChunk)
				benchLoop(b, s, verb, benchChunk)
			}
			floor := make([]time.Duration, len(subs))
			took := make([]time.Duration, len(subs))
			for done := 0; done < max(b.N, benchChunk); done += benchChunk {
				for i, s := range subs {
					fastest(&floor[i], benchLoop(b, s, "floor", benchChunk))
					fastest(&took[i], benchLoop(b, s, verb, benchChunk))
				}
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / benchChunk }
			b.ReportMetric(per(took[0]), "ns/call")
			b.ReportMetric(per(floor[0]), "floor-ns")
			b.ReportMetric(float64(took[0])/float64(floor[0]), "x-floor")
			if len(subs) > 1 {
				b.ReportMetric(per(took[1]), "base-ns/call")
				b.ReportMetric(per(floor[1]), "base-floor-ns")
				b.ReportMetric(float64(took[1])/float64(floor[1]), "base-x-floor")
				b.ReportMetric(float64(took[0])/float64(took[1]), "x-base")
			}
		})
	}
}

// benchScript starts p against a quiet abitest host holding bench/k.
func benchScript(b *testing.B, p abi.Program) abi.Script {
	b.Helper()
	h := benchHost{abitest.New()}
	h.Put("bench/k", []byte("0123456789abcdef"))
	s, err := p.Start(context.Background(), h, abi.Limits{CallTimeout: time.Hour})
	if err != nil {
		b.Fatalf("start: %v", err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// benchLoop times one event in which s calls verb n times.
func benchLoop(b *testing.B, s abi.Script, verb string, n int) time.Duration {
	t0 := time.Now()
	if err := s.Handle(context.Background(), benchEvent(verb, n)); err != nil {
		b.Fatalf("%s: %v", verb, err)
	}
	return time.Since(t0)
}

// benchEvent makes the test rule run the bench loop of verb (testdata/bench.ts)
// n times.
func benchEvent(verb string, n int) abi.Event {
	return abi.Event{Key: "verb", Op: abi.OpSet, Value: []byte(verb + " " + strconv.Itoa(n))}
}

// fastest keeps in *f the shortest duration it is given (0: none yet).
func fastest(f *time.Duration, d time.Duration) {
	if *f == 0 || d < *f {
		*f = d
	}
}
