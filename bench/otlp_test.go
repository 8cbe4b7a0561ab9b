package bench

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
)

// otlpPair is three hosts on one broker running the same Lua rule: off,
// the env's own host; admin, a host with the console and metrics of
// --admin but no export; and on, a host whose console exports a span per
// run and the metrics to a collector stub on loopback (--otlp-endpoint).
type otlpPair struct {
	e     *env
	posts *atomic.Int64 // exports the collector took
	otlp  *admin.OTLP
	flows []flow // off, admin, on
}

func newOTLPPair(tb testing.TB) *otlpPair {
	tb.Helper()
	e := newEnv(tb, host.RuleConfig{Mailbox: 1 << 16})
	var posts atomic.Int64
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
	}))
	tb.Cleanup(col.Close)
	m := admin.NewMetrics()
	o, err := admin.NewOTLP(context.Background(), admin.OTLPConfig{Endpoint: col.URL, Metrics: m, MetricsInterval: time.Second, Logger: e.log})
	if err != nil {
		tb.Fatal(err)
	}
	testutil.CloseAtEnd(tb, "otlp export", o.Close) // after the host's Close (cleanups run last first)
	c := admin.NewConsole(admin.ConsoleConfig{})
	o.Attach(c)
	h, client, on := sideHost(tb, e, "otlp", host.Config{Tracer: c, Observer: m})
	m.WatchHost(h)
	m.WatchClient(client)
	ma := admin.NewMetrics()
	ha, clientA, adm := sideHost(tb, e, "otlpadm", host.Config{Tracer: admin.NewConsole(admin.ConsoleConfig{}), Observer: ma})
	ma.WatchHost(ha)
	ma.WatchClient(clientA)
	offPath := e.load("off.lua", copyRule("off"), false)
	return &otlpPair{e: e, posts: &posts, otlp: o, flows: []flow{
		{"otlp-off", "off/in", "off/out", handledOf(e.host, offPath)},
		{"otlp-admin", adm.in, adm.out, adm.handled},
		{"otlp-on", on.in, on.out, on.handled},
	}}
}

// The fixture of BenchmarkRuleThroughputOTLP works: both hosts copy, and
// the collector gets the exports.
func TestOTLPPair(t *testing.T) {
	p := newOTLPPair(t)
	for _, f := range p.flows {
		p.e.drive(f, 20, 8)
	}
	for _, f := range p.flows {
		p.e.checkCopied(f)
	}
	p.e.checkClean()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.otlp.Close(ctx); err != nil || p.posts.Load() == 0 {
		t.Fatalf("close: %v; %d exports", err, p.posts.Load())
	}
}

// BenchmarkRuleThroughputOTLP is BenchmarkRuleThroughput's Lua flow on
// three hosts of one broker: without export or console (the baseline),
// with the console and metrics of --admin but no export, and with a span
// per run and the metrics (every second) exported to a collector stub over
// OTLP/HTTP. They run in turn in chunks of 500 events, the order rotating
// each round. Reports each flow's ev/s, otlp-on-x-base (on ÷ bare, target
// >= 0.95), otlp-admin-x-base and otlp-on-x-admin (on ÷ admin: the export
// alone).
func BenchmarkRuleThroughputOTLP(b *testing.B) {
	p := newOTLPPair(b)
	e := p.e
	e.warmUp(p.flows)
	elapsed := e.rotate(b, p.flows, nil)
	testutil.ReportRates(b, elapsed, func(i int) string { return p.flows[i].name }, "-ev/s", "-x-base")
	b.ReportMetric(elapsed[1].Seconds()/elapsed[2].Seconds(), "otlp-on-x-admin")
	for _, f := range p.flows {
		e.checkCopied(f)
	}
	e.checkClean()
}
