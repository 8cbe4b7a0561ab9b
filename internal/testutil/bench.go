package testutil

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// InFlight makes n requests with workers goroutines, each making the next
// request as soon as its previous one is answered, so that up to workers
// requests are in flight; it returns how long all n took. req makes
// request i (0 to n-1) on behalf of worker w (0 to workers-1); a worker
// stops at its first error. Once every worker stopped, each error fails
// tb (Error), and InFlight ends the test (FailNow) if there was one.
func InFlight(tb testing.TB, workers, n int, req func(w, i int) error) time.Duration {
	tb.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	t0 := time.Now()
	for w := range workers {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(n); i = next.Add(1) - 1 {
				if err := req(w, int(i)); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(t0)
	close(errs)
	failed := false
	for err := range errs {
		tb.Error(err)
		failed = true
	}
	if failed {
		tb.FailNow()
	}
	return elapsed
}

// ReportRates reports the rate of b.N operations in each of elapsed, as
// metric name(i)+unit, and for each but the first its ratio to the first,
// as name(i)+ratio: the first is the baseline the others are measured
// against in the same run.
func ReportRates(b *testing.B, elapsed []time.Duration, name func(i int) string, unit, ratio string) {
	base := float64(b.N) / elapsed[0].Seconds()
	for i, e := range elapsed {
		rate := float64(b.N) / e.Seconds()
		b.ReportMetric(rate, name(i)+unit)
		if i > 0 {
			b.ReportMetric(rate/base, name(i)+ratio)
		}
	}
}

// Cost is what a subject of Interleaved took: the time its operations
// took, and the CPU time and context switches of this process and of the
// subject's other process meanwhile (zero where /proc is not there).
type Cost struct {
	Elapsed, CPU time.Duration
	Switches     int64
}

// Interleaved runs b.N operations of each of k subjects, chunk at a time,
// taking the subjects in turn and rotating which goes first each round, so
// that a drift of the machine (another load, a frequency change) falls on
// all of them alike. run(i, n) makes n operations of subject i and returns
// how long they took; pid(i) is the other process whose CPU subject i
// counts (0: none). It returns each subject's cost.
func Interleaved(b *testing.B, k, chunk int, pid func(i int) int, run func(i, n int) time.Duration) []Cost {
	costs := make([]Cost, k)
	self := os.Getpid()
	b.ResetTimer()
	for round, done := 0, 0; done < b.N; round, done = round+1, done+chunk {
		n := min(chunk, b.N-done)
		for j := range k {
			i := (round + j) % k
			p := pid(i)
			c0, s0 := CPUTime(self)+CPUTime(p), ContextSwitches(self)+ContextSwitches(p)
			costs[i].Elapsed += run(i, n)
			costs[i].CPU += CPUTime(self) + CPUTime(p) - c0
			costs[i].Switches += ContextSwitches(self) + ContextSwitches(p) - s0
		}
	}
	b.StopTimer()
	return costs
}
