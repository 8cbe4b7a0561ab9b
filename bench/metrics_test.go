package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
)

// copyRule is the end-to-end Lua rule of BenchmarkRuleThroughput (GET
// P/in, SET P/out to its value) on the keys of prefix P.
func copyRule(prefix string) []byte {
	return fmt.Appendf(nil, `local ss = require("ssrun")
local IN, OUT = %[1]q .. "/in", %[1]q .. "/out"
ss.watch(IN)
local function check(ok, msg, code)
  if ok == nil then error(tostring(code) .. ": " .. tostring(msg), 2) end
  return ok
end
function on_event(ev) check(ss.set(OUT, check(ss.get(IN)))) end
`, prefix)
}

// metricsPair is two hosts on one broker running the same Lua rule: off,
// the env's own host without metrics, and on, a second host whose client
// and host feed an admin.Metrics (observers and scrape-time collectors),
// as `ssrun run --admin` builds it.
type metricsPair struct {
	e       *env
	metrics *admin.Metrics
	flows   []flow // off, on
}

func newMetricsPair(tb testing.TB) *metricsPair {
	tb.Helper()
	e := newEnv(tb, host.RuleConfig{Mailbox: 1 << 16})
	m := admin.NewMetrics()
	h, c, on := sideHost(tb, e, "on", host.Config{Observer: m}, func(cfg *protocol.Config) { cfg.Observer = m })
	m.WatchHost(h)
	m.WatchClient(c)
	offPath := e.load("off.lua", copyRule("off"), false)
	return &metricsPair{e: e, metrics: m, flows: []flow{
		{"metrics-off", "off/in", "off/out", handledOf(e.host, offPath)},
		{"metrics-" + on.name, on.in, on.out, on.handled},
	}}
}

// sideHost starts a second host on e's broker, with cfg's Observer and
// Tracer and mod applied to its client's settings, running copyRule(name)
// from e's folder; it returns the host, its client and the rule's flow.
func sideHost(tb testing.TB, e *env, name string, cfg host.Config, mod ...func(*protocol.Config)) (*host.Host, *protocol.Client, flow) {
	tb.Helper()
	c := dial(tb, e.addr, name, e.log, mod...)
	rt := lua.New(lua.Config{})
	tb.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the host's Close
	cfg.Store, cfg.Runtimes, cfg.Logger, cfg.Defaults = c, []abi.Runtime{rt}, e.log, host.RuleConfig{Mailbox: 1 << 16}
	h, err := host.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	testutil.CloseAtEnd(tb, "host "+name, h.Close)
	path := e.write(name+".lua", copyRule(name), false)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := h.Load(ctx, path); err != nil {
		tb.Fatal(err)
	}
	return h, c, flow{name, name + "/in", name + "/out", handledOf(h, path)}
}

// warmUp drives 50 events of each flow: connections, caches, first
// instances.
func (e *env) warmUp(flows []flow) {
	for _, f := range flows {
		e.drive(f, 50, rotateInflight)
	}
}

// rotateInflight is the events rotate (and warmUp) keep in flight.
const rotateInflight = 64

// rotate drives b.N events of each of flows in chunks of 500
// (rotateChunks) and returns the time each took; between, when not nil,
// runs after each round, outside the timing.
func (e *env) rotate(b *testing.B, flows []flow, between func()) []time.Duration {
	return rotateChunks(b, flows, 500, func(f flow, n int) time.Duration { return e.drive(f, n, rotateInflight) }, between)
}

// compare warms up flows, drives them in turn (rotate), reports each one's
// rate and its ratio to the first, and checks that every rule copied its
// last value with nothing dropped or failed.
func (e *env) compare(b *testing.B, flows []flow) {
	e.warmUp(flows)
	elapsed := e.rotate(b, flows, nil)
	testutil.ReportRates(b, elapsed, func(i int) string { return flows[i].name }, "-ev/s", "-x-base")
	for _, f := range flows {
		e.checkCopied(f)
	}
	e.checkClean()
}

// handledOf returns a function counting the events the rule at path of h
// handled.
func handledOf(h *host.Host, path string) func() uint64 {
	return func() uint64 {
		for _, s := range h.Status() {
			if s.Path == path {
				return s.Handled
			}
		}
		return 0
	}
}

// scrape gathers the metrics as a Prometheus scrape does and returns them.
func (p *metricsPair) scrape(tb testing.TB) string {
	tb.Helper()
	w := httptest.NewRecorder()
	p.metrics.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if w.Code != http.StatusOK {
		tb.Fatalf("scrape: %d %s", w.Code, w.Body)
	}
	return w.Body.String()
}

// check fails unless both rules copied their last value, nothing dropped
// or failed, and the scrape counted the on rule's n events.
func (p *metricsPair) check(tb testing.TB, n uint64) {
	tb.Helper()
	for _, f := range p.flows {
		p.e.checkCopied(f)
	}
	p.e.checkClean()
	want := fmt.Sprintf("ssrun_rule_events_handled_total{kind=\"lua\",rule=\"on.lua\"} %d\n", n)
	if body := p.scrape(tb); !strings.Contains(body, want) || !strings.Contains(body, "ssrun_rule_handler_seconds_count{rule=\"on.lua\"}") {
		tb.Errorf("scrape lacks %q or the handler histogram", want)
	}
}

// The fixture of BenchmarkRuleThroughputMetrics works: both hosts copy,
// and the metrics count the events of the one with metrics.
func TestMetricsPair(t *testing.T) {
	p := newMetricsPair(t)
	for _, f := range p.flows {
		p.e.drive(f, 20, 8)
	}
	p.check(t, 20)
}

// BenchmarkRuleThroughputMetrics is BenchmarkRuleThroughput's Lua flow on
// two hosts of one broker, with metrics off (the baseline) and on (an
// admin.Metrics fed by the host's and the client's observers, its
// collectors registered, and scraped after every round, outside the
// timing, as Prometheus would every 15 s or so). They run in turn in chunks
// of 500 events, the order rotating each round; one op is one event of
// each. Reports metrics-off-ev/s, metrics-on-ev/s and metrics-on-x-base
// (target >= 0.97).
func BenchmarkRuleThroughputMetrics(b *testing.B) {
	p := newMetricsPair(b)
	p.e.warmUp(p.flows)
	elapsed := p.e.rotate(b, p.flows, func() { p.scrape(b) })
	testutil.ReportRates(b, elapsed, func(i int) string { return p.flows[i].name }, "-ev/s", "-x-base")
	p.check(b, uint64(b.N)+50)
}
