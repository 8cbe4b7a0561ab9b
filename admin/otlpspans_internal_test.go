package admin

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A collector that refuses the batch makes the flush fail with its answer,
// and the spans are not kept (the batcher never grows past its bound);
// spans added after close are dropped.
func TestSpanBatcherCollectorRefuses(t *testing.T) {
	var posts atomic.Int32
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		posts.Add(1)
		http.Error(w, "busy", http.StatusServiceUnavailable)
	}))
	defer col.Close()
	sb := newSpanBatcher(col.URL+"/v1/traces", "test", slog.New(slog.DiscardHandler))
	sb.add([]byte{0x0a, 0x00})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := sb.close(ctx); err == nil || !strings.Contains(err.Error(), "503") {
		t.Fatalf("close: %v, want the collector's 503", err)
	}
	sb.add([]byte{0x0a, 0x00})
	sb.mu.Lock()
	n, dropped := sb.n, sb.dropped
	sb.closed = false // as if open again, without its goroutine: to see the bound alone
	sb.mu.Unlock()
	if posts.Load() != 1 || n != 0 || dropped != 1 {
		t.Errorf("%d posts, %d spans pending, %d dropped; want 1 post, none pending, the late span dropped", posts.Load(), n, dropped)
	}
	big := make([]byte, 1<<20)
	for range 6 {
		sb.add(big)
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if len(sb.pending) > maxPendingBytes || sb.n != 3 {
		t.Errorf("%d bytes, %d spans pending; want at most %d bytes: 3 spans of 1 MiB", len(sb.pending), sb.n, maxPendingBytes)
	}
}
