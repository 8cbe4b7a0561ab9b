package admin

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// The spans' batching: each run's span is built as the official OTLP
// protobuf types (tracepb.Span and its KeyValues), from a pooled runSpan
// that holds all of one span's messages in a few slices, and appended to a
// batch, which one goroutine uploads through the official OTLP/HTTP client
// (otlptracehttp.NewClient: the OTEL_EXPORTER_OTLP_* variables, headers,
// TLS, gzip, retries); the runSpans go back to the pool once their batch is
// uploaded. The SDK's span pipeline (span objects, attribute copies,
// snapshots, then these protobuf structs) costs about 18 µs and 100
// allocations a run (BenchmarkOTLPExportRun); this builds the protobuf
// structs alone, without allocating once the pool is warm. The metrics
// still go through the SDK: every 15 s, not per run.

// Batch bounds.
const (
	spanBatch       = 512              // spans that start an upload at once, and the most in one upload
	spanFlushEvery  = 2 * time.Second  // else pending spans wait at most this
	maxPendingSpans = 4096             // spans built and not yet uploading; past it new spans are dropped
	uploadTimeout   = 30 * time.Second // one upload with its retries (each request: OTEL_EXPORTER_OTLP_TIMEOUT, 10 s)
	scopeName       = "github.com/ssrun/ssrun/admin"
)

// spanBatcher gathers the runs' spans and uploads them.
type spanBatcher struct {
	client   otlptrace.Client
	endpoint string // for the logs
	log      *slog.Logger

	mu      sync.Mutex
	pending []*runSpan
	spare   []*runSpan // the last uploaded batch's slice, for reuse
	dropped int        // spans dropped since the last upload, the batch full
	closed  bool

	// Held by an upload: the messages below are reused by each.
	upMu  sync.Mutex
	rs    []*tracepb.ResourceSpans // one: the resource and scope, and the spans of one upload
	ss    *tracepb.ScopeSpans
	spans []*tracepb.Span

	kick    chan struct{}   // a batch is full
	stop    chan struct{}   // closed by close
	stopped chan struct{}   // closed when run returns
	flushed chan error      // run's last flush
	final   context.Context // close's context, for the last flush; set before stop is closed
}

// newSpanBatcher uploads spans of service through client, which it
// starts; close stops it.
func newSpanBatcher(ctx context.Context, client otlptrace.Client, endpoint, service string, log *slog.Logger) (*spanBatcher, error) {
	if err := client.Start(ctx); err != nil {
		return nil, fmt.Errorf("otlp traces: %w", err)
	}
	ss := &tracepb.ScopeSpans{Scope: &commonpb.InstrumentationScope{Name: scopeName}}
	res := &resourcepb.Resource{Attributes: []*commonpb.KeyValue{{Key: "service.name",
		Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: service}}}}}
	sb := &spanBatcher{client: client, endpoint: endpoint, log: log,
		rs: []*tracepb.ResourceSpans{{Resource: res, ScopeSpans: []*tracepb.ScopeSpans{ss}}}, ss: ss,
		spans: make([]*tracepb.Span, 0, spanBatch),
		kick:  make(chan struct{}, 1), stop: make(chan struct{}), stopped: make(chan struct{}), flushed: make(chan error, 1)}
	go sb.run()
	return sb, nil
}

// add queues one run's span; the batcher owns it from then on.
func (sb *spanBatcher) add(s *runSpan) {
	sb.mu.Lock()
	if sb.closed || len(sb.pending) >= maxPendingSpans {
		sb.dropped++
		sb.mu.Unlock()
		s.release()
		return
	}
	if sb.pending == nil {
		sb.pending = make([]*runSpan, 0, spanBatch)
	}
	sb.pending = append(sb.pending, s)
	full := len(sb.pending) == spanBatch
	sb.mu.Unlock()
	if full {
		select {
		case sb.kick <- struct{}{}:
		default:
		}
	}
}

// run uploads the batches until close, then the last one.
func (sb *spanBatcher) run() {
	defer close(sb.stopped)
	t := time.NewTicker(spanFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-sb.kick:
		case <-t.C:
		case <-sb.stop:
			sb.flushed <- sb.flush(sb.final)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), uploadTimeout)
		err := sb.flush(ctx)
		cancel()
		if err != nil {
			sb.log.Warn("otlp export failed", "endpoint", sb.endpoint, "err", err)
		}
	}
}

// flush uploads what is pending, spanBatch spans at a time; after a failed
// upload (the client has retried it) the rest is dropped too.
func (sb *spanBatcher) flush(ctx context.Context) error {
	sb.mu.Lock()
	batch, dropped := sb.pending, sb.dropped
	sb.pending, sb.dropped, sb.spare = sb.spare, 0, nil
	sb.mu.Unlock()
	if dropped > 0 {
		sb.log.Warn("otlp spans dropped: the collector does not keep up", "endpoint", sb.endpoint, "dropped", dropped)
	}
	var err error
	failed := 0
	for start := 0; start < len(batch); start += spanBatch {
		chunk := batch[start:min(start+spanBatch, len(batch))]
		if err == nil {
			if err = sb.upload(ctx, chunk); err != nil {
				failed = len(batch) - start
			}
		}
		for _, s := range chunk {
			s.release()
		}
	}
	clear(batch)
	sb.mu.Lock()
	if sb.spare == nil && cap(batch) <= maxPendingSpans {
		sb.spare = batch[:0]
	}
	sb.mu.Unlock()
	if err != nil {
		return fmt.Errorf("%d spans: %w", failed, err)
	}
	return nil
}

// upload sends spans in one request.
func (sb *spanBatcher) upload(ctx context.Context, spans []*runSpan) error {
	sb.upMu.Lock()
	defer sb.upMu.Unlock()
	for _, s := range spans {
		sb.spans = append(sb.spans, &s.span)
	}
	sb.ss.Spans = sb.spans
	err := sb.client.UploadTraces(ctx, sb.rs)
	clear(sb.spans)
	sb.spans, sb.ss.Spans = sb.spans[:0], nil
	return err
}

// close uploads what is pending and stops the client, waiting until ctx
// ends: then the upload under way is cut off.
func (sb *spanBatcher) close(ctx context.Context) error {
	sb.mu.Lock()
	already := sb.closed
	sb.closed = true
	sb.mu.Unlock()
	if already {
		return nil
	}
	sb.final = ctx
	close(sb.stop)
	var err error
	select {
	case err = <-sb.flushed:
	case <-ctx.Done():
		err = fmt.Errorf("spans not all sent: %w", context.Cause(ctx))
	}
	if serr := sb.client.Stop(context.WithoutCancel(ctx)); serr != nil && err == nil { // Stop cuts off an upload under way
		err = fmt.Errorf("stopping the client: %w", serr)
	}
	<-sb.stopped
	return err
}

// runSpan is one run's span with the messages it points to, kept in a few
// slices that are reused: pooled, and released once the span is uploaded
// (or dropped).
type runSpan struct {
	span   tracepb.Span
	ids    [32]byte // the trace ID (16 bytes), span ID and parent span ID (8 each)
	status tracepb.Status

	attrs  []*commonpb.KeyValue // the span's attributes, then each event's
	kvs    []commonpb.KeyValue
	anys   []commonpb.AnyValue
	strs   []commonpb.AnyValue_StringValue
	ints   []commonpb.AnyValue_IntValue
	events []*tracepb.Span_Event
	evs    []tracepb.Span_Event

	nkv, nstr, nint, nev int // in use
}

var runSpans = sync.Pool{New: func() any { return new(runSpan) }}

// maxPooledAttrs bounds the attributes a pooled runSpan keeps room for: a
// run with many calls does not make every span hold its size.
const maxPooledAttrs = 256

// newRunSpan returns a runSpan with room for strs string and ints int
// attributes and events events, in all (the span's and its events').
func newRunSpan(strs, ints, events int) *runSpan {
	s := runSpans.Get().(*runSpan)
	s.kvs = grow(s.kvs, strs+ints)
	s.attrs = grow(s.attrs, strs+ints)
	s.anys = grow(s.anys, strs+ints)
	s.strs = grow(s.strs, strs)
	s.ints = grow(s.ints, ints)
	s.events = grow(s.events, events)
	s.evs = grow(s.evs, events)
	s.nkv, s.nstr, s.nint, s.nev = 0, 0, 0, 0
	return s
}

// grow returns b with length n, reusing its array when it is large enough.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// release puts s back in the pool; the caller no longer uses it.
func (s *runSpan) release() {
	if len(s.kvs) > maxPooledAttrs || len(s.evs) > maxPooledAttrs {
		return
	}
	// The strings of the last run are let go; the messages are overwritten
	// field by field on reuse (keeping their protobuf state).
	for i := range s.nstr {
		s.strs[i].StringValue = ""
	}
	for i := range s.nkv {
		s.kvs[i].Key = ""
	}
	for i := range s.nev {
		s.evs[i].Name = ""
	}
	s.span.Name, s.span.Attributes, s.span.Events, s.span.Status, s.status.Message = "", nil, nil, nil, ""
	runSpans.Put(s)
}

// str adds a string attribute; the caller places it with attrsFrom.
func (s *runSpan) str(key, value string) {
	v := &s.strs[s.nstr]
	v.StringValue = value
	s.nstr++
	s.kv(key).Value = v
}

// int adds an int attribute.
func (s *runSpan) int(key string, value int64) {
	v := &s.ints[s.nint]
	v.IntValue = value
	s.nint++
	s.kv(key).Value = v
}

// kv adds an attribute named key; the caller sets its value.
func (s *runSpan) kv(key string) *commonpb.AnyValue {
	a, kv := &s.anys[s.nkv], &s.kvs[s.nkv]
	kv.Key, kv.Value = key, a
	s.attrs[s.nkv] = kv
	s.nkv++
	return a
}

// attrsFrom is the attributes added since the from'th.
func (s *runSpan) attrsFrom(from int) []*commonpb.KeyValue {
	return s.attrs[from:s.nkv:s.nkv]
}

// event adds an event at time at; its attributes are added after it,
// then set with endEvent.
func (s *runSpan) event(at uint64, name string) *tracepb.Span_Event {
	ev := &s.evs[s.nev]
	ev.TimeUnixNano, ev.Name, ev.Attributes = at, name, nil
	s.events[s.nev] = ev
	s.nev++
	return ev
}
