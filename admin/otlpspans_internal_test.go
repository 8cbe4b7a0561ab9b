package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// newTestBatcher is a spanBatcher uploading to the collector at url (an
// httptest server's) with the client's options opts.
func newTestBatcher(t *testing.T, url string, opts ...otlptracehttp.Option) *spanBatcher {
	t.Helper()
	opts = append([]otlptracehttp.Option{otlptracehttp.WithEndpoint(strings.TrimPrefix(url, "http://")), otlptracehttp.WithInsecure()}, opts...)
	sb, err := newSpanBatcher(context.Background(), otlptracehttp.NewClient(opts...), url, "test", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

// testSpan is a span with one attribute and no event.
func testSpan() *runSpan {
	s := newRunSpan(1, 0, 0)
	s.span.Name = "rule test.lua"
	s.str("ssrun.rule", "test.lua")
	s.span.Attributes = s.attrsFrom(0)
	return s
}

// A collector that refuses the batch (not a status to retry) makes the
// flush fail with its answer, and the spans are not kept; spans added
// after close are dropped; the pending spans never pass their bound.
func TestSpanBatcherCollectorRefuses(t *testing.T) {
	var posts atomic.Int32
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		http.Error(w, "no such tenant", http.StatusBadRequest)
	}))
	defer col.Close()
	sb := newTestBatcher(t, col.URL)
	sb.add(testSpan())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.close(ctx); err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "no such tenant") {
		t.Fatalf("close: %v, want the collector's 400 and its message", err)
	}
	sb.add(testSpan())
	sb.mu.Lock()
	n, dropped := len(sb.pending), sb.dropped
	sb.closed = false // as if open again, without its goroutine: to see the bound alone
	sb.mu.Unlock()
	if posts.Load() != 1 || n != 0 || dropped != 1 {
		t.Errorf("%d posts, %d spans pending, %d dropped; want 1 post, none pending, the late span dropped", posts.Load(), n, dropped)
	}
	for range maxPendingSpans + 3 {
		sb.add(testSpan())
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if len(sb.pending) != maxPendingSpans || sb.dropped != 4 {
		t.Errorf("%d spans pending, %d dropped; want %d pending, 4 dropped", len(sb.pending), sb.dropped, maxPendingSpans)
	}
}

// A collector that answers 503 (busy) gets the batch again: the client's
// retries (here a millisecond apart).
func TestSpanBatcherRetries(t *testing.T) {
	var posts atomic.Int32
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if posts.Add(1) == 1 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
		}
	}))
	defer col.Close()
	sb := newTestBatcher(t, col.URL, otlptracehttp.WithRetry(otlptracehttp.RetryConfig{
		Enabled: true, InitialInterval: time.Millisecond, MaxInterval: time.Millisecond, MaxElapsedTime: time.Minute}))
	sb.add(testSpan())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.close(ctx); err != nil || posts.Load() != 2 {
		t.Fatalf("close: %v after %d posts, want success at the second", err, posts.Load())
	}
}

// Close's context ending cuts off an upload under way (a collector that
// does not answer), and the batcher's goroutine ends.
func TestSpanBatcherCloseCutsOff(t *testing.T) {
	release := make(chan struct{})
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer col.Close()
	defer close(release)
	sb := newTestBatcher(t, col.URL)
	sb.add(testSpan())
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-sb.stop // close has started
		cancel()
	}()
	if err := sb.close(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("close: %v, want the spans not sent, cut off", err)
	}
	select {
	case <-sb.stopped:
	default:
		t.Fatal("the batcher's goroutine still runs after close")
	}
}

// A failed run's span has its error status and refused calls; the next
// span, likely built in the same pooled runSpan once the first is sent,
// has nothing of it.
func TestRunSpanReused(t *testing.T) {
	var mu sync.Mutex
	var spans []*tracepb.Span
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, rs := range req.ResourceSpans {
			if rs.Resource.Attributes[0].Value.GetStringValue() != "ssrun" || rs.ScopeSpans[0].Scope.Name != scopeName {
				t.Errorf("resource %v, scope %v", rs.Resource, rs.ScopeSpans[0].Scope)
			}
			for _, ss := range rs.ScopeSpans {
				spans = append(spans, ss.Spans...)
			}
		}
	}))
	defer col.Close()
	o, err := NewOTLP(context.Background(), OTLPConfig{Endpoint: col.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	at := time.Now()
	o.export(Entry{At: at, Rule: "a.lua", Key: "k", Op: "SET", Version: "1:0:x", Outcome: OutcomeFailed, Err: "boom",
		Denied: []string{"set other/k"}}, time.Millisecond,
		[]host.TracedCall{{Verb: "get", Key: "k", Status: abi.StatusOK, At: at, Took: 3 * time.Microsecond}})
	if err := o.spans.flush(ctx); err != nil {
		t.Fatal(err)
	}
	o.export(Entry{At: at, Rule: "b.lua", Key: "k", Op: "SET", Version: "2:0:x", Outcome: OutcomeHandled}, time.Millisecond, nil)
	if err := o.Close(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(spans) != 2 {
		t.Fatalf("%d spans, want 2", len(spans))
	}
	a, b := spans[0], spans[1]
	if a.Name != "rule a.lua" || a.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || a.Status.GetMessage() != "boom" ||
		len(a.Events) != 2 || a.Events[0].Name != "get" || a.Events[1].Name != "denied" ||
		a.Events[0].Attributes[2].Key != "ssrun.took_us" || a.Events[0].Attributes[2].Value.GetIntValue() != 3 ||
		a.Events[1].Attributes[0].Value.GetStringValue() != "set other/k" || len(a.Attributes) != 5 {
		t.Errorf("the failed run's span: %v", a)
	}
	if b.Name != "rule b.lua" || b.Status != nil || len(b.Events) != 0 || len(b.Attributes) != 5 || b.Attributes[0].Value.GetStringValue() != "b.lua" {
		t.Errorf("the next span: %v", b)
	}
}
