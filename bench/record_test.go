package bench

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/testrun"
)

// BenchmarkRecordOverhead is the cost of `ssrun dev --record`: the Lua copy
// rule (lua/in to lua/out: one get, one set) handling SETs with 64 requests
// in flight in a host without a Recorder (off) and in one whose
// testrun.HostRecorder writes the trace to a file (on: three lines per
// event), interleaved in rounds of 1,000 events in one run. Reports
// off-ev/s, on-ev/s and on-x-off. An event whose handler failed (a store
// call timing out on a loaded machine) counts as handled: it was recorded.
//
//	go test ./bench -run '^$' -bench RecordOverhead -benchtime 20000x
func BenchmarkRecordOverhead(b *testing.B) {
	const inflight, round = 64, 1000
	f, err := os.Create(filepath.Join(b.TempDir(), "bench.trace"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	rec, err := testrun.NewHostRecorder(f, time.Now())
	if err != nil {
		b.Fatal(err)
	}
	cfg := host.RuleConfig{Mailbox: 1 << 16}
	var (
		envs  []*env
		flows []flow
	)
	names := []string{"off", "on"}
	for i, r := range []host.Recorder{nil, rec} {
		e := newEnvCache(b, cfg, sharedWasmCache(b), func(c *host.Config) { c.Recorder = r })
		p := e.load("rule.lua", luaRule(b, "A"), false)
		fl := flow{names[i], "lua/in", "lua/out", func() uint64 { s := e.status(p); return s.Handled + s.Failed }}
		e.drive(fl, 50, inflight) // warm up
		envs, flows = append(envs, e), append(flows, fl)
	}
	b.ResetTimer()
	elapsed := make([]time.Duration, 2)
	for done := 0; done < b.N; done += round {
		n := min(round, b.N-done)
		for i, e := range envs {
			elapsed[i] += e.drive(flows[i], n, inflight)
		}
	}
	b.StopTimer()
	for _, e := range envs {
		e.checkClean()
	}
	if err := rec.Err(); err != nil || rec.Records() < b.N {
		b.Fatalf("recorder: %v, %d records for %d events", err, rec.Records(), b.N)
	}
	testutil.ReportRates(b, elapsed, func(i int) string { return names[i] }, "-ev/s", "-x-off")
}
