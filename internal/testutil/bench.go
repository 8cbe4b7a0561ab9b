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
// request i (0 to n-1) on behalf of worker w (0 to workers-1). The first
// error fails tb (Fatal, once every worker has stopped).
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
	for err := range errs {
		tb.Fatal(err)
	}
	return elapsed
}
