package host

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The measured runs behind docs/scale-out.md, as benchmarks (each runs its
// measurement once, whatever b.N; scripts/bench group runs both):
//
//	SSRUN_GROUP_SCALE=20x1000 go test ./host -run '^$' -bench '^BenchmarkGroupScale$' -benchtime 1x -timeout 30m
//	go test ./host -run '^$' -bench '^BenchmarkGroupThroughput$' -benchtime 1x
const groupScaleEnv = "SSRUN_GROUP_SCALE" // HOSTSxRULES; default 5x100

// BenchmarkGroupScale starts H hosts sharing R rules on one embedded broker
// and measures: the time to spread the rules, the requests per host per
// second once settled (leases, membership reads, progress), the time until
// a cut host's rules are all owned elsewhere, and the rules moved when a
// host joins.
func BenchmarkGroupScale(b *testing.B) {
	spec := os.Getenv(groupScaleEnv)
	if spec == "" {
		spec = "5x100"
	}
	hs, rs, ok := strings.Cut(spec, "x")
	nh, err1 := strconv.Atoi(hs)
	nr, err2 := strconv.Atoi(rs)
	if !ok || err1 != nil || err2 != nil || nh < 2 {
		b.Fatalf("%s=%q: want HOSTSxRULES, at least 2 hosts", groupScaleEnv, spec)
	}
	ttl := 5 * time.Second
	c := newCluster(b, nr, ttl)
	start := time.Now()
	var ms []*member
	for range nh {
		ms = append(ms, c.start())
	}
	bound := ceilDiv(nr, nh) + 1
	waitLong(b, "rules spread", func() bool { return c.settled(bound) })
	spread := c.settledAt.Sub(start) // not the steps settled takes to confirm it
	b.Logf("%d hosts, %d rules, ttl %v: spread (max %d per host) %v after the first host started", nh, nr, ttl, bound, spread.Round(time.Millisecond))

	window := 3 * ttl
	before := make([]uint64, len(ms))
	for i, m := range ms {
		before[i] = m.client.Stats().Requests
	}
	time.Sleep(window) // a measuring window, not a wait for a condition
	var total uint64
	for i, m := range ms {
		total += m.client.Stats().Requests - before[i]
	}
	perHost := float64(total) / float64(nh) / window.Seconds()
	b.Logf("idle requests: %.1f per host per second, %.1f in all (%.2f per rule per second)", perHost, perHost*float64(nh), perHost*float64(nh)/float64(nr))

	victim := ms[0]
	gs, _ := victim.host.Group()
	cut := time.Now()
	victim.proxy.Cut()
	waitLong(b, "the cut host's rules owned elsewhere", func() bool { return c.settled(nr, victim) })
	failover := c.settledAt.Sub(cut)
	b.Logf("cut host owned %d rules: all owned elsewhere %v after the cut (ttl + ttl/3 = %v)", len(gs.Owned), failover.Round(time.Millisecond), ttl+ttl/3)

	beforeJoin := c.owners(victim)
	joined := time.Now()
	c.start()
	waitLong(b, "rules spread again", func() bool { return c.settled(ceilDiv(nr, nh)+1, victim) })
	join := c.settledAt.Sub(joined)
	moved := 0
	for r, o := range c.owners(victim) {
		if beforeJoin[r][0] != o[0] {
			moved++
		}
	}
	b.Logf("a host joined %d: %d rules moved (ideal %d) in %v", nh-1, moved, nr/nh, join.Round(time.Millisecond))
	b.ReportMetric(spread.Seconds(), "spread-s")
	b.ReportMetric(perHost, "idle-req/s/host")
	b.ReportMetric(failover.Seconds(), "failover-s")
	b.ReportMetric(failover.Seconds()/(ttl+ttl/3).Seconds(), "failover-x-bound")
	b.ReportMetric(float64(moved), "join-moved")
	b.ReportMetric(float64(moved)/float64(nr/nh), "join-moved-x-ideal")
	b.ReportMetric(join.Seconds(), "join-s")
}

// BenchmarkGroupThroughput measures events handled per second with 1, 2
// and 3 hosts sharing 30 independent rules (each value written once the
// previous was handled, 30 writers in parallel), in one run; the ratios
// are to 1 host.
func BenchmarkGroupThroughput(b *testing.B) {
	const rounds = 60
	var base float64
	for n := 1; n <= 3; n++ {
		c := newCluster(b, 30, 5*time.Second)
		var ms []*member
		for range n {
			ms = append(ms, c.start())
		}
		waitFor(b, "rules spread", func() bool { return c.settled(ceilDiv(30, n) + 1) })
		before := make([]uint64, n)
		for i, m := range ms {
			before[i] = m.client.Stats().Requests
		}
		start := time.Now()
		c.drive(rounds, time.Minute, nil)
		took := time.Since(start)
		rate := float64(30*rounds) / took.Seconds()
		if n == 1 {
			base = rate
		}
		var reqs uint64
		for i, m := range ms {
			reqs += m.client.Stats().Requests - before[i]
		}
		perHost := float64(reqs) / float64(n) / took.Seconds()
		b.Logf("%d host(s): %d events in %v: %.0f events/s (x%.2f of 1 host); %.0f requests per host per second",
			n, 30*rounds, took.Round(time.Millisecond), rate, rate/base, perHost)
		k := strconv.Itoa(n) + "host"
		b.ReportMetric(rate, k+"-ev/s")
		b.ReportMetric(rate/base, k+"-x-1host")
		b.ReportMetric(perHost, k+"-req/s/host")
	}
}

// waitLong is waitFor with a bound for large clusters: 10 minutes, polled
// every 100 ms.
func waitLong(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after 10m waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
