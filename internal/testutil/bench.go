package testutil

import (
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
