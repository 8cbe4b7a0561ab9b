package bench

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// thermostatTrace is a trace of n set points of thermostat1/setPoint
// ("0".."n-1", 1 ms apart), as `ssrun record` would write it.
func thermostatTrace(tb testing.TB, n int) *testrun.TraceData {
	tb.Helper()
	const start = 1767225600000
	var b strings.Builder
	tw, err := testrun.NewTraceWriter(&b, testrun.TraceHeader{StartMs: start, Keys: []string{"thermostat1/setPoint"}})
	if err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		r := testrun.Record{TMs: start + int64(i), Kind: testrun.RecordNotify, Key: "thermostat1/setPoint", Op: "SET", Version: "v" + strconv.Itoa(i)}
		r.SetBytes([]byte(strconv.Itoa(i)))
		if err := tw.Write(r); err != nil {
			tb.Fatal(err)
		}
	}
	tr, err := testrun.ParseTrace("bench.trace", strings.NewReader(b.String()))
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

// BenchmarkReplayVsLive is replay speed next to live handling, in the same
// run, of the thermostat example: LIVE is the rule loaded in the host on
// the embedded broker, a user client SETting its set point with 64
// requests in flight, until the host has handled every event; REPLAY is
// testrun.Replay (`ssrun replay`) of a trace of as many set points, the
// rule compiled and started once per replay. One op is one event of each.
// Reports live-ev/s, replay-ev/s and replay-x-live.
func BenchmarkReplayVsLive(b *testing.B) {
	const inflight = 64
	src, err := os.ReadFile(filepath.Join("..", "examples", "thermostat", "thermostat.lua"))
	if err != nil {
		b.Fatal(err)
	}
	e := newEnv(b, host.RuleConfig{Mailbox: 1 << 16})
	p := e.load("thermostat.lua", src, false)
	live := flow{"live", "thermostat1/setPoint", "hvac1/target", func() uint64 { return e.status(p).Handled }}
	e.drive(live, 50, inflight) // warm up

	dir := b.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "thermostat.lua"), src, 0o644); err != nil {
		b.Fatal(err)
	}
	rt := lua.New(lua.Config{})
	defer rt.Close(context.Background())
	tr := thermostatTrace(b, b.N)

	b.ResetTimer()
	elapsed := []time.Duration{e.drive(live, b.N, inflight), 0}
	t0 := time.Now()
	writes, err := testrun.Replay(context.Background(), tr, dir, testrun.ReplayOptions{Runtimes: []abi.Runtime{rt}})
	elapsed[1] = time.Since(t0)
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if len(writes) < b.N {
		b.Fatalf("replay made %d writes for %d events", len(writes), b.N)
	}
	names := []string{"live", "replay"}
	testutil.ReportRates(b, elapsed, func(i int) string { return names[i] }, "-ev/s", "-x-live")
	e.checkClean()
}
