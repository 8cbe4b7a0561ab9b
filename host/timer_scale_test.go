package host

import (
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
)

// scaleTimers is how many timers TestTimerScale arms: 10,000, or
// SSRUN_TIMER_SCALE (100000 by hand: about 100 s under -race on 2 cores,
// each arm being two store writes).
func scaleTimers(t testing.TB) int {
	n := 10_000
	if s := os.Getenv("SSRUN_TIMER_SCALE"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			t.Fatalf("SSRUN_TIMER_SCALE: %v", err)
		}
	}
	return n
}

// Many timers pending in one host (10,000 in CI, 100,000 by hand), armed
// through the rules' bindings (each written to the store): the host's
// goroutines do not grow with them (one scheduler goroutine, no time.Timer
// per timer), and every one is scheduled.
func TestTimerScale(t *testing.T) {
	n := scaleTimers(t)
	const rules = 16
	b := brokertest.Start(t)
	e := newEnvAt(t, b.Addr(), func(o *Config) { o.clock = newFakeTimerClock(); o.Defaults.MaxTimers = n })
	trs := make([]*timerRule, rules)
	for i := range trs {
		trs[i] = e.loadTimerRule(fmt.Sprintf("scale%02d", i))
	}
	before, stored := runtime.NumGoroutine(), b.Stats()
	start := time.Now()
	var wg sync.WaitGroup
	for i, tr := range trs {
		wg.Go(func() {
			for j := i; j < n; j += rules {
				if err := tr.h.Timer(e.ctx(), "t"+strconv.Itoa(j), time.Hour+time.Duration(j)*time.Millisecond, abi.TimerOptions{}); err != nil {
					t.Errorf("timer %d: %v", j, err)
					return
				}
			}
		})
	}
	wg.Wait()
	took := time.Since(start)
	if s := e.host.Stats(); s.Timers != n || e.host.timers.Pending() != n {
		t.Fatalf("armed %d, scheduled %d; want %d", s.Timers, e.host.timers.Pending(), n)
	}
	// Request goroutines of the store client end with their requests; a
	// goroutine per timer would leave n.
	waitFor(t, "goroutines back to what they were before arming", func() bool { return runtime.NumGoroutine() <= before+20 })
	now := b.Stats()
	t.Logf("%d timers armed through the binding in %v (%.0f/s); goroutines %d before, %d after; store: %.2f keys and %.0f bytes (its accounting) per timer",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds(), before, runtime.NumGoroutine(),
		float64(now.Keys-stored.Keys)/float64(n), float64(now.Bytes-stored.Bytes)/float64(n))
}
