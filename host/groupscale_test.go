package host

import (
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The measured runs behind docs/scale-out.md: off unless asked for, as
// they take minutes.
//
//	SSRUN_GROUP_SCALE=20x1000 go test ./host -run TestGroupScale -v -timeout 30m
//	SSRUN_GROUP_BENCH=1 go test ./host -run TestGroupThroughput -v
const (
	groupScaleEnv = "SSRUN_GROUP_SCALE" // HOSTSxRULES
	groupBenchEnv = "SSRUN_GROUP_BENCH"
)

// TestGroupScale starts H hosts sharing R rules on one embedded broker and
// measures: the time to spread the rules, the requests per host per second
// once settled (leases, membership reads, progress), the time until a cut
// host's rules are all owned elsewhere, and the rules moved when a host
// joins.
func TestGroupScale(t *testing.T) {
	spec := os.Getenv(groupScaleEnv)
	if spec == "" {
		t.Skip(groupScaleEnv + " not set (e.g. 20x1000)")
	}
	hs, rs, ok := strings.Cut(spec, "x")
	nh, err1 := strconv.Atoi(hs)
	nr, err2 := strconv.Atoi(rs)
	if !ok || err1 != nil || err2 != nil || nh < 2 {
		t.Fatalf("%s=%q: want HOSTSxRULES, at least 2 hosts", groupScaleEnv, spec)
	}
	ttl := 5 * time.Second
	c := newCluster(t, nr, ttl)
	start := time.Now()
	var ms []*member
	for range nh {
		ms = append(ms, c.start())
	}
	bound := ceilDiv(nr, nh) + 1
	waitLong(t, "rules spread", func() bool { return c.settled(bound) })
	t.Logf("%d hosts, %d rules, ttl %v: spread (max %d per host) %v after the first host started", nh, nr, ttl, bound, time.Since(start).Round(time.Millisecond))

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
	t.Logf("idle requests: %.1f per host per second, %.1f in all (%.2f per rule per second)", perHost, perHost*float64(nh), perHost*float64(nh)/float64(nr))

	victim := ms[0]
	gs, _ := victim.host.Group()
	cut := time.Now()
	victim.proxy.Cut()
	waitLong(t, "the cut host's rules owned elsewhere", func() bool { return c.settled(nr, victim) })
	t.Logf("cut host owned %d rules: all owned elsewhere %v after the cut (ttl + ttl/3 = %v)", len(gs.Owned), time.Since(cut).Round(time.Millisecond), ttl+ttl/3)

	beforeJoin := c.owners(victim)
	joined := time.Now()
	ms = append(ms, c.start())
	waitLong(t, "rules spread again", func() bool { return c.settled(ceilDiv(nr, nh)+1, victim) })
	moved := 0
	for r, o := range c.owners(victim) {
		if beforeJoin[r][0] != o[0] {
			moved++
		}
	}
	t.Logf("a host joined %d: %d rules moved (ideal %d) in %v", nh-1, moved, nr/nh, time.Since(joined).Round(time.Millisecond))
}

// TestGroupThroughput measures events handled per second with 1, 2 and 3
// hosts sharing 30 independent rules (each value written once the previous
// was handled, 30 writers in parallel), in one run.
func TestGroupThroughput(t *testing.T) {
	if os.Getenv(groupBenchEnv) == "" {
		t.Skip(groupBenchEnv + " not set")
	}
	const rounds = 60
	var base float64
	for n := 1; n <= 3; n++ {
		c := newCluster(t, 30, 5*time.Second)
		var ms []*member
		for range n {
			ms = append(ms, c.start())
		}
		waitFor(t, "rules spread", func() bool { return c.settled(ceilDiv(30, n) + 1) })
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
		t.Logf("%d host(s): %d events in %v: %.0f events/s (x%.2f of 1 host); %.0f requests per host per second",
			n, 30*rounds, took.Round(time.Millisecond), rate, rate/base, float64(reqs)/float64(n)/took.Seconds())
	}
}

// waitLong is waitFor with a bound for large clusters: 10 minutes, polled
// every 100 ms.
func waitLong(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10m waiting for %s", what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
