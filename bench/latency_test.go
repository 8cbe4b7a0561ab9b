package bench

import (
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
)

// BenchmarkLatency is change-to-write-visible latency, one event in flight
// at a time: the user client SETs a rule's in key to a new value, the rule
// GETs it and SETs its out key to it, and another client, which watches
// every out key (KEYNOTIFY), times the notification of that value from
// just before the user's SET. Subjects, as in BenchmarkRuleThroughput: the
// BASELINE (a Go handler on its own protocol.Client, no host), the host
// with a native Go rule, and the host with the Lua, Go WebAssembly and
// plugin rules. One op is one change of each subject, taken in turn, the
// order rotating each op. Reports <subject>-p50-us and -p99-us, and for
// each host subject its p50 and p99 over the baseline's (-p50-x-base,
// -p99-x-base; target for lua and wasm: p50 <= 1.2) and its p50 over the
// host-native rule's (-p50-x-native: what the runtime adds to the host).
// For the host subjects it also reports the p50 of the handler call alone
// (-handle-p50-us, timed by the host: the runtime, the rule and its GET and
// SET round trips), which tells a runtime's share of the latency from the
// host's (routing, mailbox, worker).
func BenchmarkLatency(b *testing.B) {
	prebuild(b, "A")
	calls := &callTimes{took: map[string][]time.Duration{}}
	e := newEnv(b, host.RuleConfig{}, func(c *host.Config) { c.Observer = calls })
	native := startNativeClient(b, e.addr, e.log)
	flows := append([]flow{{"baseline", "go/in", "go/out", native.handled.Load}}, e.hostFlows()...)
	var outs []string
	for _, f := range flows {
		outs = append(outs, f.out)
	}
	out := startOutWatch(b, e.addr, e.log, outs)
	seq := 0
	change := func(f flow) time.Duration {
		v := "p" + strconv.Itoa(seq)
		seq++
		return out.measure(b, v, 1, func() { e.set(f.in, v) })[0]
	}
	for range 50 { // warm up: connections, caches, first instances
		for _, f := range flows {
			change(f)
		}
	}
	lat := make([][]time.Duration, len(flows))
	calls.reset()
	b.ResetTimer()
	for i := range b.N {
		for j := range flows {
			k := (i + j) % len(flows)
			lat[k] = append(lat[k], change(flows[k]))
		}
	}
	b.StopTimer()
	p50, p99 := make([]time.Duration, len(flows)), make([]time.Duration, len(flows))
	for k, f := range flows {
		p50[k], p99[k] = quantile(lat[k], 0.5), quantile(lat[k], 0.99)
		b.ReportMetric(us(p50[k]), f.name+"-p50-us")
		b.ReportMetric(us(p99[k]), f.name+"-p99-us")
	}
	files := map[string]string{"host-native": "rule.native", "lua": "rule.lua", "wasm": "rule.wasm", "plugin": "pluginrule"}
	for _, f := range flows[1:] {
		b.ReportMetric(us(quantile(calls.of(files[f.name]), 0.5)), f.name+"-handle-p50-us")
	}
	for k := 1; k < len(flows); k++ {
		b.ReportMetric(float64(p50[k])/float64(p50[0]), flows[k].name+"-p50-x-base")
		b.ReportMetric(float64(p99[k])/float64(p99[0]), flows[k].name+"-p99-x-base")
		if k > 1 {
			b.ReportMetric(float64(p50[k])/float64(p50[1]), flows[k].name+"-p50-x-native")
		}
	}
	for _, f := range flows {
		e.checkCopied(f)
	}
	e.checkClean()
	if native.failed.Load() != 0 {
		b.Errorf("baseline: %d handlings failed", native.failed.Load())
	}
}

// callTimes is a host.Observer that keeps the duration of every handler
// call, by rule file name.
type callTimes struct {
	mu   sync.Mutex
	took map[string][]time.Duration
}

func (c *callTimes) ObserveHandle(rule string, took time.Duration, _ bool) {
	c.mu.Lock()
	c.took[rule] = append(c.took[rule], took)
	c.mu.Unlock()
}

func (c *callTimes) reset() {
	c.mu.Lock()
	clear(c.took)
	c.mu.Unlock()
}

func (c *callTimes) of(rule string) []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.took[rule]
}
