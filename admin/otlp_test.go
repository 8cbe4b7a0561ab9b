package admin_test

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
)

// collector is an OTLP/HTTP collector stub on loopback: it keeps the spans
// posted to /v1/traces and accepts metrics on /v1/metrics.
type collector struct {
	srv     *httptest.Server
	mu      sync.Mutex
	spans   []*tracepb.Span
	metrics int
	headers []http.Header // of the trace posts
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = gz
		}
		b, err := io.ReadAll(body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			var req collectortrace.ExportTraceServiceRequest
			c.headers = append(c.headers, r.Header.Clone())
			if err := proto.Unmarshal(b, &req); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			for _, rs := range req.ResourceSpans {
				for _, ss := range rs.ScopeSpans {
					c.spans = append(c.spans, ss.Spans...)
				}
			}
		case "/v1/metrics":
			c.metrics++
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	t.Cleanup(c.srv.Close)
	return c
}

func (c *collector) got() ([]*tracepb.Span, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*tracepb.Span(nil), c.spans...), c.metrics
}

func attr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// The chain's two runs are two spans of one trace, derived from the
// outside write: each names its rule, event and cause; door.lua's span
// carries its write; the metrics go too.
func TestOTLPExportsTheChain(t *testing.T) {
	col := newCollector(t)
	o, err := admin.NewOTLP(context.Background(), admin.OTLPConfig{Endpoint: col.srv.URL, Metrics: admin.NewMetrics(), MetricsInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r := newConsoleRig(t, map[string]string{
		"door.lua": `local ss = require("ssrun"); ss.watch("door/front")
			function on_event(ev) assert(ss.get("door/front")); assert(ss.set("alarm/state", "intrusion")) end`,
		"alarm.lua": `local ss = require("ssrun"); ss.watch("alarm/state")
			function on_event(ev) local v = ss.get("siren/garden"); assert(v == nil); assert(ss.set("siren/garden", "on")) end`,
	}, host.Config{}, o.Attach)
	r.set("door/front", "open")
	testutil.WaitFor(t, "both runs", func() bool {
		return len(r.console.Runs("door.lua")) == 1 && len(r.console.Runs("alarm.lua")) == 1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.Close(ctx); err != nil { // flushes
		t.Fatal(err)
	}
	spans, metrics := col.got()
	byRule := map[string]*tracepb.Span{}
	for _, s := range spans {
		byRule[attr(s, "ssrun.rule")] = s
	}
	door, alarm := byRule["door.lua"], byRule["alarm.lua"]
	if len(spans) != 2 || door == nil || alarm == nil {
		t.Fatalf("spans %v, want one run of door.lua and one of alarm.lua", spans)
	}
	if string(door.TraceId) != string(alarm.TraceId) {
		t.Errorf("the chain's runs are in traces %x and %x, want one", door.TraceId, alarm.TraceId)
	}
	if string(alarm.ParentSpanId) != string(door.SpanId) {
		t.Errorf("alarm.lua's run hangs under span %x, want door.lua's run (%x), whose write caused it", alarm.ParentSpanId, door.SpanId)
	}
	if len(door.ParentSpanId) == 0 || string(door.ParentSpanId) == string(door.SpanId) {
		t.Errorf("door.lua's run hangs under %x, want the chain's origin", door.ParentSpanId)
	}
	if door.Name != "rule door.lua" || attr(door, "ssrun.key") != "door/front" || attr(door, "ssrun.origin.key") != "door/front" ||
		attr(alarm, "ssrun.caused_by.rule") != "door.lua" || attr(alarm, "ssrun.outcome") != admin.OutcomeHandled {
		t.Errorf("attributes: door %v, alarm %v", door.Attributes, alarm.Attributes)
	}
	if door.EndTimeUnixNano < door.StartTimeUnixNano || door.StartTimeUnixNano == 0 {
		t.Errorf("door.lua's span runs %d..%d", door.StartTimeUnixNano, door.EndTimeUnixNano)
	}
	// Each run's events: its host calls, in order, with their status and
	// never a value, then its writes.
	for s, want := range map[*tracepb.Span]string{
		door:  "get door/front OK, set alarm/state OK, write alarm/state",
		alarm: "get siren/garden NOT_FOUND, set siren/garden OK, write siren/garden",
	} {
		var got []string
		for _, ev := range s.Events {
			got = append(got, strings.TrimSpace(ev.Name+" "+evAttr(ev, "ssrun.key")+" "+evAttr(ev, "ssrun.status")))
			if ev.TimeUnixNano < s.StartTimeUnixNano || ev.TimeUnixNano > s.EndTimeUnixNano {
				t.Errorf("%s: event %v outside its run %d..%d", s.Name, ev, s.StartTimeUnixNano, s.EndTimeUnixNano)
			}
			if strings.Contains(ev.String(), "intrusion") || strings.Contains(ev.String(), "\"on\"") || strings.Contains(ev.String(), "open") {
				t.Errorf("%s: event %v carries a value", s.Name, ev)
			}
		}
		if strings.Join(got, ", ") != want {
			t.Errorf("%s: events %q, want %q", s.Name, got, want)
		}
	}
	if metrics == 0 {
		t.Error("no metrics export at close")
	}
}

func evAttr(ev *tracepb.Span_Event, key string) string {
	for _, a := range ev.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

func TestParseOTLPEndpoint(t *testing.T) {
	for in, want := range map[string]string{"127.0.0.1:4318": "127.0.0.1:4318 true", "http://[::1]:4318": "[::1]:4318 true", "https://collector:4318/": "collector:4318 false"} {
		hp, insecure, err := admin.ParseOTLPEndpoint(in)
		if got := hp + " " + map[bool]string{true: "true", false: "false"}[insecure]; err != nil || got != want {
			t.Errorf("%q: %q %v, want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "ftp://x:1", "http://x", "http://x:1/v1/traces", "http://u:p@x:1", ":4318"} {
		if _, _, err := admin.ParseOTLPEndpoint(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// With Sample 0.5, a share of the chains is exported, each whole: both of
// its runs or neither.
func TestOTLPSampleKeepsChainsWhole(t *testing.T) {
	col := newCollector(t)
	o, err := admin.NewOTLP(context.Background(), admin.OTLPConfig{Endpoint: col.srv.URL, Sample: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	r := newConsoleRig(t, map[string]string{
		"door.lua":  `local ss = require("ssrun"); ss.watch("door/front"); function on_event(ev) assert(ss.set("alarm/state", ev.value)) end`,
		"alarm.lua": `local ss = require("ssrun"); ss.watch("alarm/state"); function on_event(ev) end`,
	}, host.Config{}, o.Attach)
	const chains = 24
	for i := range chains {
		r.set("door/front", fmt.Sprint("open ", i))
		testutil.WaitFor(t, "the chain's runs", func() bool { // one chain at a time: each is whole
			n := 0
			for _, e := range r.console.Recent() {
				if e.Rule == "alarm.lua" && e.Outcome == admin.OutcomeHandled {
					n++
				}
			}
			return n == i+1
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	spans, _ := col.got()
	perTrace := map[string][]string{}
	for _, s := range spans {
		perTrace[string(s.TraceId)] = append(perTrace[string(s.TraceId)], attr(s, "ssrun.rule"))
	}
	for tid, rules := range perTrace {
		if sort.Strings(rules); strings.Join(rules, " ") != "alarm.lua door.lua" {
			t.Errorf("trace %x has runs %v, want both of its chain", tid, rules)
		}
	}
	// The chance of 0 or 24 of 24 chains at 0.5 is 2 in 16 million.
	if n := len(perTrace); n == 0 || n == chains {
		t.Errorf("%d of %d chains exported at 0.5", n, chains)
	}
	for _, bad := range []float64{-0.1, 1.5} {
		if _, err := admin.NewOTLP(context.Background(), admin.OTLPConfig{Endpoint: col.srv.URL, Sample: bad}); err == nil {
			t.Errorf("sample %v accepted", bad)
		}
	}
}

// The spans' exporter takes the OTEL_EXPORTER_OTLP_* variables: here extra
// headers and gzip.
func TestOTLPTakesTheEnvironment(t *testing.T) {
	t.Setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=garden,authorization=Bearer%20t0k")
	t.Setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
	col := newCollector(t)
	o, err := admin.NewOTLP(context.Background(), admin.OTLPConfig{Endpoint: col.srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r := newConsoleRig(t, map[string]string{
		"door.lua": `local ss = require("ssrun"); ss.watch("door/front"); function on_event(ev) end`,
	}, host.Config{}, o.Attach)
	r.set("door/front", "open")
	testutil.WaitFor(t, "the run", func() bool { return len(r.console.Runs("door.lua")) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	spans, _ := col.got()
	col.mu.Lock()
	defer col.mu.Unlock()
	if len(spans) != 1 || spans[0].Name != "rule door.lua" || len(col.headers) != 1 {
		t.Fatalf("%d posts, spans %v; want one post of door.lua's run", len(col.headers), spans)
	}
	h := col.headers[0]
	if h.Get("Content-Encoding") != "gzip" || h.Get("X-Tenant") != "garden" || h.Get("Authorization") != "Bearer t0k" {
		t.Errorf("headers %v, want gzip, x-tenant and authorization", h)
	}
}
