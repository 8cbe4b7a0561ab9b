package ruletimers

import (
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"

	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/timers"
)

// Memory of the host per pending timer: 100,000 timers armed in a rule's
// timers (the in-memory half of arm: index entry, timer, heap slot),
// measured as live heap after a GC.
func BenchmarkTimerMemory(b *testing.B) {
	const n = 100_000
	var perTimer float64
	for range b.N {
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		svc := &Services{Scheduler: timers.NewScheduler(stillClock{}, nil), Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		box := mailbox.New(1024, 0, nil, nil) // host.DefaultMailbox
		rt := New(svc, "memory.gorule", box)
		rt.GoLive(&version{}) // any version will do
		for i := range n {
			name := fmt.Sprintf("timer-%06d", i)
			shard := timers.TimerShard(name)
			rt.indexed(shard, name)
			rt.install(nil, shard, &timers.Timer{Owner: rt, Name: name, Deadline: t0 + int64(i), Index: -1})
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if svc.Scheduler.Pending() != n {
			b.Fatalf("%d scheduled", svc.Scheduler.Pending())
		}
		perTimer = float64(after.HeapAlloc-before.HeapAlloc) / n
		runtime.KeepAlive(rt)
	}
	b.ReportMetric(perTimer, "B/timer")
}
