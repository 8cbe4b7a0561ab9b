package admin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
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
