package admin_test

import (
	"context"
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
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		switch r.URL.Path {
		case "/v1/traces":
			var req collectortrace.ExportTraceServiceRequest
			if err := proto.Unmarshal(body, &req); err != nil {
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
	var calls []*tracepb.Span
	for _, s := range spans {
		if rule := attr(s, "ssrun.rule"); rule != "" {
			byRule[rule] = s
		} else {
			calls = append(calls, s)
		}
	}
	door, alarm := byRule["door.lua"], byRule["alarm.lua"]
	if len(byRule) != 2 || door == nil || alarm == nil {
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
	if len(door.Events) != 1 || door.Events[0].Name != "write" || !strings.Contains(door.Events[0].String(), "alarm/state") {
		t.Errorf("door.lua's span events: %v, want its write of alarm/state", door.Events)
	}
	if door.EndTimeUnixNano < door.StartTimeUnixNano || door.StartTimeUnixNano == 0 {
		t.Errorf("door.lua's span runs %d..%d", door.StartTimeUnixNano, door.EndTimeUnixNano)
	}
	// The host calls of each run are child spans of it, with
	// their status and never a value.
	want := map[string][]string{
		string(door.SpanId):  {"get door/front OK", "set alarm/state OK"},
		string(alarm.SpanId): {"get siren/garden NOT_FOUND", "set siren/garden OK"},
	}
	got := map[string][]string{}
	for _, c := range calls {
		got[string(c.ParentSpanId)] = append(got[string(c.ParentSpanId)], c.Name+" "+attr(c, "ssrun.key")+" "+attr(c, "ssrun.status"))
		if string(c.TraceId) != string(door.TraceId) || c.StartTimeUnixNano == 0 || c.EndTimeUnixNano < c.StartTimeUnixNano {
			t.Errorf("call span %v: want it in the chain's trace, with its times", c)
		}
		if strings.Contains(c.String(), "intrusion") || strings.Contains(c.String(), "open") {
			t.Errorf("call span %v carries a value", c)
		}
	}
	for parent, w := range want {
		sort.Strings(got[parent])
		if strings.Join(got[parent], ", ") != strings.Join(w, ", ") {
			t.Errorf("calls under %x: %q, want %q", parent, got[parent], w)
		}
	}
	if len(calls) != 4 {
		t.Errorf("%d call spans, want 4: %v", len(calls), calls)
	}
	if metrics == 0 {
		t.Error("no metrics export at close")
	}
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
