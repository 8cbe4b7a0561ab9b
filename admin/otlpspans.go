package admin

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// The spans' own OTLP/HTTP exporter: each run's span is encoded straight
// into protobuf (opentelemetry-proto's trace.proto field numbers) and
// appended to a batch, which one goroutine posts to the collector's
// /v1/traces. The SDK's span objects, attribute copies, snapshots and
// protobuf structs cost about 18 µs and 100 allocations a run
// (BenchmarkOTLPExportRun); this costs a few µs and none but the batch's
// growth. The metrics still go through the SDK: every 15 s, not per run.

// Batch bounds.
const (
	spanBatch       = 512             // spans that start a post at once
	spanFlushEvery  = 2 * time.Second // else pending spans wait at most this
	maxPendingBytes = 4 << 20         // spans encoded and not yet posted; past it new spans are dropped
	postTimeout     = 10 * time.Second
	scopeName       = "github.com/ssrun/ssrun/admin"
)

// Field numbers of opentelemetry-proto (collector/trace/v1, trace/v1,
// common/v1, resource/v1).
const (
	fReqResourceSpans  = 1 // ExportTraceServiceRequest.resource_spans
	fRSResource        = 1 // ResourceSpans.resource
	fRSScopeSpans      = 2 // ResourceSpans.scope_spans
	fResAttributes     = 1 // Resource.attributes
	fSSScope           = 1 // ScopeSpans.scope
	fSSSpans           = 2 // ScopeSpans.spans
	fScopeName         = 1 // InstrumentationScope.name
	fSpanTraceID       = 1
	fSpanSpanID        = 2
	fSpanParentSpanID  = 4
	fSpanName          = 5
	fSpanKind          = 6
	fSpanStart         = 7
	fSpanEnd           = 8
	fSpanAttributes    = 9
	fSpanEvents        = 11
	fSpanStatus        = 15
	fEventTime         = 1
	fEventName         = 2
	fEventAttributes   = 3
	fStatusMessage     = 2
	fStatusCode        = 3
	fKVKey             = 1
	fKVValue           = 2
	fAnyString         = 1
	fAnyInt            = 3
	spanKindConsumer   = 5
	statusCodeError    = 2
	protobufContentTyp = "application/x-protobuf"
)

// spanBatcher gathers encoded spans and posts them.
type spanBatcher struct {
	url    string
	client *http.Client
	log    *slog.Logger
	head   []byte // ResourceSpans.resource, encoded
	scope  []byte // the InstrumentationScope, encoded

	mu      sync.Mutex
	pending []byte // encoded ScopeSpans.spans fields
	n       int    // spans in pending
	spare   []byte // the last posted batch's buffer, for reuse
	dropped int    // spans dropped since the last post, the buffer full
	closed  bool

	kick    chan struct{} // a batch is full
	stop    chan struct{} // closed by close
	stopped chan struct{} // closed when run returns
	flushed chan error    // run's last flush
}

func newSpanBatcher(url, service string, log *slog.Logger) *spanBatcher {
	var res []byte // Resource{attributes: [service.name]}
	res = appendKVString(res, fResAttributes, "service.name", service)
	var head []byte // ResourceSpans.resource
	head = protowire.AppendTag(head, fRSResource, protowire.BytesType)
	head = protowire.AppendBytes(head, res)
	var scope []byte // InstrumentationScope{name}
	scope = protowire.AppendTag(scope, fScopeName, protowire.BytesType)
	scope = protowire.AppendString(scope, scopeName)
	sb := &spanBatcher{url: url, client: &http.Client{Timeout: postTimeout}, log: log, head: head, scope: scope,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}), flushed: make(chan error, 1)}
	go sb.run()
	return sb
}

// add appends one encoded span (the Span message's bytes).
func (sb *spanBatcher) add(span []byte) {
	sb.mu.Lock()
	if sb.closed || len(sb.pending)+len(span) > maxPendingBytes {
		sb.dropped++
		sb.mu.Unlock()
		return
	}
	sb.pending = protowire.AppendTag(sb.pending, fSSSpans, protowire.BytesType)
	sb.pending = protowire.AppendBytes(sb.pending, span)
	sb.n++
	full := sb.n == spanBatch
	sb.mu.Unlock()
	if full {
		select {
		case sb.kick <- struct{}{}:
		default:
		}
	}
}

// run posts the batches until close, then the last one.
func (sb *spanBatcher) run() {
	defer close(sb.stopped)
	t := time.NewTicker(spanFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-sb.kick:
		case <-t.C:
		case <-sb.stop:
			sb.flushed <- sb.flush(context.Background())
			return
		}
		if err := sb.flush(context.Background()); err != nil {
			sb.log.Warn("otlp export failed", "endpoint", sb.url, "err", err)
		}
	}
}

// flush posts what is pending.
func (sb *spanBatcher) flush(ctx context.Context) error {
	sb.mu.Lock()
	spans, n, dropped := sb.pending, sb.n, sb.dropped
	sb.pending, sb.n, sb.dropped, sb.spare = sb.spare[:0], 0, 0, nil
	sb.mu.Unlock()
	if dropped > 0 {
		sb.log.Warn("otlp spans dropped: the collector does not keep up", "endpoint", sb.url, "dropped", dropped)
	}
	if n == 0 {
		sb.giveBack(spans)
		return nil
	}
	err := sb.post(ctx, sb.request(spans))
	sb.giveBack(spans)
	if err != nil {
		return fmt.Errorf("%d spans: %w", n, err)
	}
	return nil
}

func (sb *spanBatcher) giveBack(buf []byte) {
	sb.mu.Lock()
	if sb.spare == nil && cap(buf) <= maxPendingBytes {
		sb.spare = buf[:0]
	}
	sb.mu.Unlock()
}

// request wraps spans in an ExportTraceServiceRequest.
func (sb *spanBatcher) request(spans []byte) []byte {
	ssLen := protowire.SizeTag(fSSScope) + protowire.SizeBytes(len(sb.scope)) + len(spans)
	rsLen := len(sb.head) + protowire.SizeTag(fRSScopeSpans) + protowire.SizeBytes(ssLen)
	b := make([]byte, 0, protowire.SizeTag(fReqResourceSpans)+protowire.SizeBytes(rsLen))
	b = protowire.AppendTag(b, fReqResourceSpans, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(rsLen))
	b = append(b, sb.head...)
	b = protowire.AppendTag(b, fRSScopeSpans, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(ssLen))
	b = protowire.AppendTag(b, fSSScope, protowire.BytesType)
	b = protowire.AppendBytes(b, sb.scope)
	return append(b, spans...)
}

func (sb *spanBatcher) post(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, postTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sb.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", protobufContentTyp)
	res, err := sb.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(res.Body, 512)) // the status says enough if this fails
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("collector answered %s: %q", res.Status, msg)
	}
	return nil
}

// close posts what is pending and stops, waiting until ctx ends.
func (sb *spanBatcher) close(ctx context.Context) error {
	sb.mu.Lock()
	already := sb.closed
	sb.closed = true
	sb.mu.Unlock()
	if already {
		return nil
	}
	close(sb.stop)
	select {
	case err := <-sb.flushed:
		<-sb.stopped
		return err
	case <-ctx.Done():
		return fmt.Errorf("spans not all sent: %w", errors.Join(ctx.Err(), context.Cause(ctx)))
	}
}

// appendKVString appends a KeyValue with a string value as field num.
func appendKVString(b []byte, num protowire.Number, key, value string) []byte {
	any := protowire.SizeTag(fAnyString) + protowire.SizeBytes(len(value))
	kv := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(any)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kv))
	b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, fKVValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(any))
	b = protowire.AppendTag(b, fAnyString, protowire.BytesType)
	return protowire.AppendString(b, value)
}

// sizeKVString is the size of appendKVString's field.
func sizeKVString(num protowire.Number, key, value string) int {
	any := protowire.SizeTag(fAnyString) + protowire.SizeBytes(len(value))
	kv := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(any)
	return protowire.SizeTag(num) + protowire.SizeBytes(kv)
}

// appendKVInt appends a KeyValue with an int value as field num.
func appendKVInt(b []byte, num protowire.Number, key string, value int64) []byte {
	any := protowire.SizeTag(fAnyInt) + protowire.SizeVarint(uint64(value))
	kv := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(any)
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(kv))
	b = protowire.AppendTag(b, fKVKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, fKVValue, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(any))
	b = protowire.AppendTag(b, fAnyInt, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(value))
}

func sizeKVInt(num protowire.Number, key string, value int64) int {
	any := protowire.SizeTag(fAnyInt) + protowire.SizeVarint(uint64(value))
	kv := protowire.SizeTag(fKVKey) + protowire.SizeBytes(len(key)) + protowire.SizeTag(fKVValue) + protowire.SizeBytes(any)
	return protowire.SizeTag(num) + protowire.SizeBytes(kv)
}

// unixNano is t for OTLP: nanoseconds since the epoch.
func unixNano(t time.Time) uint64 { return uint64(t.UnixNano()) }
