package wasm

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// BenchmarkVerbsVsBaseline compares the Go guest SDK with a baseline SDK
// (e.g. main's) in one process: build this tree's test rule against the
// baseline SDK and name it in SSRUN_BASELINE_WASM,
//
//	git worktree add /tmp/base main
//	cp -r runtime/wasm/testdata/rule /tmp/base/runtime/wasm/testdata/
//	(cd /tmp/base && GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o /tmp/base.wasm ./runtime/wasm/testdata/rule)
//	SSRUN_BASELINE_WASM=/tmp/base.wasm go test -run '^$' -bench VsBaseline ./runtime/wasm
//
// Each row runs the BenchmarkVerbs loop of its verb in events of 256
// calls, in turn: the floor and the verb in this build, then both in the
// baseline, so that both see the same load. Each of the four is taken as
// its fastest chunk, the one least disturbed by other processes on a
// shared machine (this favours the build that allocates more: a chunk
// without a guest GC cycle wins). One op is one call in each. Reports
// ns/call and base-ns/call, x-floor and base-x-floor (each build's verb
// over its own floor) and x-base (this build's verb over the baseline's).
func BenchmarkVerbsVsBaseline(b *testing.B) {
	path := os.Getenv("SSRUN_BASELINE_WASM")
	if path == "" {
		b.Skip("SSRUN_BASELINE_WASM names no baseline build of testdata/rule")
	}
	base, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	r := sharedRuntime(b)
	lim := abi.Limits{CallTimeout: time.Hour}
	var subs [2]abi.Script // this build, the baseline
	for i, src := range [][]byte{guest(b, "rule"), base} {
		h := newBenchHost()
		h.Put("bench/k", []byte("0123456789abcdef"))
		subs[i] = start(b, compile(b, r, "rule"+strconv.Itoa(i)+".wasm", src), h, lim)
	}
	for _, verb := range benchVerbs {
		b.Run(verb, func(b *testing.B) {
			for _, s := range subs { // warm up
				benchLoop(b, s, "floor", verbChunk)
				benchLoop(b, s, verb, verbChunk)
			}
			var floor, took [2]fastest
			for done := 0; done+verbChunk <= max(b.N, verbChunk); done += verbChunk {
				for i, s := range subs {
					floor[i].add(benchLoop(b, s, "floor", verbChunk))
					took[i].add(benchLoop(b, s, verb, verbChunk))
				}
			}
			b.ReportMetric(float64(took[0])/verbChunk, "ns/call")
			b.ReportMetric(float64(took[1])/verbChunk, "base-ns/call")
			b.ReportMetric(float64(took[0])/float64(floor[0]), "x-floor")
			b.ReportMetric(float64(took[1])/float64(floor[1]), "base-x-floor")
			b.ReportMetric(float64(took[0])/float64(took[1]), "x-base")
		})
	}
}
