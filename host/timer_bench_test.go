package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/timers"
)

// benchDelay is the delay of each probe timer: long enough that the probe
// is stored and scheduled well before it is due.
const benchDelay = 20 * time.Millisecond

// Firing lateness: how long after its deadline a timer's event reaches the
// rule's handler (the real clock, the embedded broker), with 1, 1,000 and
// 100,000 timers pending in the host's scheduler, next to a bare
// time.AfterFunc of the same delay measured in the same run. Each of b.N
// probes is armed through the binding, 20 ms ahead. Run it with a fixed
// count, e.g.
//
//	go test ./host -run '^$' -bench TimerLateness -benchtime 200x
func BenchmarkTimerLateness(b *testing.B) {
	floor := make([]time.Duration, 0, b.N)
	for range b.N {
		start := time.Now()
		at := make(chan time.Time, 1)
		time.AfterFunc(benchDelay, func() { at <- time.Now() })
		floor = append(floor, (<-at).Sub(start.Add(benchDelay)))
	}
	p50f, p99f := percentiles(floor)
	b.ReportMetric(float64(p50f.Microseconds()), "floor-p50-µs")
	b.ReportMetric(float64(p99f.Microseconds()), "floor-p99-µs")
	for _, pending := range []int{1, 1000, 100_000} {
		lat := timerLateness(b, pending)
		p50, p99 := percentiles(lat)
		b.ReportMetric(float64(p50.Microseconds()), fmt.Sprintf("%d-p50-µs", pending))
		b.ReportMetric(float64(p99.Microseconds()), fmt.Sprintf("%d-p99-µs", pending))
		b.ReportMetric(float64(p50)/float64(max(p50f, time.Microsecond)), fmt.Sprintf("%d-p50-x", pending))
		b.ReportMetric(float64(p99)/float64(max(p99f, time.Microsecond)), fmt.Sprintf("%d-p99-x", pending))
	}
}

// timerLateness measures b.N probes with pending timers in the scheduler:
// the probe, and pending-1 others due in a day, put in the heap directly
// (arming 100,000 through the store takes a minute; see TestTimerScale).
func timerLateness(b *testing.B, pending int) []time.Duration {
	h, host := benchTimerHost(b)
	far := time.Now().Add(24 * time.Hour).UnixMilli()
	idle := ownerFunc(func(*timers.Timer, int64) {})
	for i := range pending - 1 {
		host.timers.Schedule(&timers.Timer{Owner: idle, Index: -1}, far+int64(i))
	}
	lat := make([]time.Duration, 0, b.N)
	ctx := context.Background()
	for range b.N {
		if err := h.rule.Timer(ctx, "probe", benchDelay, abi.TimerOptions{}); err != nil {
			b.Fatal(err)
		}
		f := <-h.fired
		lat = append(lat, f.at.Sub(time.UnixMilli(f.deadline)))
	}
	return lat
}

// benchProbe is the probe rule of a benchmark: its binding, and the time
// (to the nanosecond) its handler got each TIMER event, with the deadline.
type benchProbe struct {
	rule  abi.Host
	fired chan struct {
		at       time.Time
		deadline int64
	}
}

// benchTimerHost is a host with the probe rule on a fresh embedded broker,
// closed when the benchmark ends.
func benchTimerHost(b *testing.B) (*benchProbe, *Host) {
	b.Helper()
	p := &benchProbe{fired: make(chan struct {
		at       time.Time
		deadline int64
	}, 1)}
	h, _ := goRuleHost(b, "probe", goRule{
		init: func(_ context.Context, h abi.Host) error { p.rule = h; return nil },
		handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
			if ev.Op == abi.OpTimer {
				p.fired <- struct {
					at       time.Time
					deadline int64
				}{time.Now(), ev.Deadline}
			}
			return nil
		},
	}, Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	return p, h
}

// percentiles returns the median and the 99th percentile of d.
func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2], s[min(len(s)-1, len(s)*99/100)]
}
