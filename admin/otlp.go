package admin

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// OpenTelemetry export (--otlp-endpoint; off by default, and then nothing
// of it runs): a span per rule run, sent over OTLP/HTTP with the official
// SDK's batching exporter, and the admin metrics, read from their
// Prometheus registry at each export. The runs of one chain (an outside
// change, the rules it set off, the rules their writes set off) share a
// trace, whose ID is derived from the chain's origin: the change's key and
// version; each run's span hangs under a span of that origin (not itself
// exported). A run's writes are events of its span.

// OTLPConfig configures an OTLP export.
type OTLPConfig struct {
	// Endpoint is the collector's OTLP/HTTP address: http://HOST:PORT,
	// https://HOST:PORT, or HOST:PORT for http.
	Endpoint string
	// Metrics, when set, are exported too, every MetricsInterval (15 s
	// when zero).
	Metrics         *Metrics
	MetricsInterval time.Duration
	// Service names the process (service.name): "ssrun" when empty.
	Service string
	// Logger gets the exporter's failures (a collector away); slog.Default()
	// when nil. The OpenTelemetry SDK has one error handler per process:
	// the last OTLP made sets it.
	Logger *slog.Logger
}

// OTLP exports spans and metrics; create it with NewOTLP, Attach it to the
// console whose runs it exports, and Close it.
type OTLP struct {
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider // nil without metrics
	tracer trace.Tracer

	mu      sync.Mutex
	writers map[writeKey]writer // the run that made each recent write in a handler
	order   []writeKey          // writers' keys, oldest first, to bound it
	next    int                 // where in order the next write goes once full

	closeOnce sync.Once
	closeErr  error
}

// ParseOTLPEndpoint reads an --otlp-endpoint value: the collector's host
// and port, and whether it speaks plain HTTP.
func ParseOTLPEndpoint(s string) (hostport string, insecure bool, err error) {
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return "", false, fmt.Errorf("otlp endpoint: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", false, fmt.Errorf("otlp endpoint %q: the scheme is http or https", s)
	}
	if u.Path != "" && u.Path != "/" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", false, fmt.Errorf("otlp endpoint %q: give the collector's address alone (SCHEME://HOST:PORT)", s)
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil || host == "" || port == "" {
		return "", false, fmt.Errorf("otlp endpoint %q: want HOST:PORT", s)
	}
	return u.Host, u.Scheme == "http", nil
}

// NewOTLP starts the export to cfg.Endpoint; nothing is sent until there
// is something to send.
func NewOTLP(ctx context.Context, cfg OTLPConfig) (*OTLP, error) {
	hostport, insecure, err := ParseOTLPEndpoint(cfg.Endpoint)
	if err != nil {
		return nil, err
	}
	topts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(hostport)}
	mopts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(hostport)}
	if insecure {
		topts, mopts = append(topts, otlptracehttp.WithInsecure()), append(mopts, otlpmetrichttp.WithInsecure())
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("otlp export failed", "endpoint", cfg.Endpoint, "err", err) }))
	texp, err := otlptracehttp.New(ctx, topts...)
	if err != nil {
		return nil, fmt.Errorf("otlp traces: %w", err)
	}
	service := cfg.Service
	if service == "" {
		service = "ssrun"
	}
	res := resource.NewSchemaless(attribute.String("service.name", service))
	o := &OTLP{tp: sdktrace.NewTracerProvider(sdktrace.WithBatcher(texp), sdktrace.WithResource(res), sdktrace.WithIDGenerator(runIDs{})),
		writers: map[writeKey]writer{}}
	o.tracer = o.tp.Tracer("github.com/ssrun/ssrun/admin")
	if cfg.Metrics != nil {
		mexp, err := otlpmetrichttp.New(ctx, mopts...)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("otlp metrics: %w", err), o.tp.Shutdown(ctx))
		}
		interval := cfg.MetricsInterval
		if interval <= 0 {
			interval = 15 * time.Second
		}
		reader := sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(interval),
			sdkmetric.WithProducer(promBridge.NewMetricProducer(promBridge.WithGatherer(cfg.Metrics.reg))))
		o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	}
	return o, nil
}

// Attach makes o export the runs c sees, with their host calls; call it
// before the host runs.
func (o *OTLP) Attach(c *Console) { c.sink, c.wroteSink = o.export, o.wrote }

// maxWriters bounds the writes whose runs o remembers, to parent the runs
// they cause.
const maxWriters = 4096

type writeKey struct{ key, version string }

// writer is the run that made a write: its rule and event.
type writer struct {
	rule  string
	cause provenance.Cause
}

// wrote remembers which run made a write, for the runs it causes.
func (o *OTLP) wrote(rule string, step provenance.Step, cause provenance.Cause) {
	k := writeKey{step.Key, step.Version}
	o.mu.Lock()
	defer o.mu.Unlock()
	if _, ok := o.writers[k]; !ok {
		if len(o.order) < maxWriters {
			o.order = append(o.order, k)
		} else {
			delete(o.writers, o.order[o.next])
			o.order[o.next] = k
			o.next = (o.next + 1) % maxWriters
		}
	}
	o.writers[k] = writer{rule, cause}
}

// parentOf returns the span ID of the run whose write caused e's event,
// if it is known.
func (o *OTLP) parentOf(e Entry) (trace.SpanID, bool) {
	if e.ByRule == "" || e.Origin == nil { // without an origin, writer and run are in traces of their own
		return trace.SpanID{}, false
	}
	o.mu.Lock()
	w, ok := o.writers[writeKey{e.Key, e.Version}]
	o.mu.Unlock()
	if !ok || w.rule != e.ByRule {
		return trace.SpanID{}, false
	}
	return runSpanID(w.rule, w.cause.Key, w.cause.Op, w.cause.Version), true
}

// runSpanID derives the span ID of rule's run on an event.
func runSpanID(rule, key, op, version string) trace.SpanID {
	h := sha256.Sum256([]byte("span\x00" + rule + "\x00" + key + "\x00" + op + "\x00" + version))
	return trace.SpanID(h[:8])
}

// spanIDKey carries the span ID runIDs gives the span started with it.
type spanIDKey struct{}

// runIDs gives a run's span its derived ID, and every other span a random
// one (math/rand/v2's generator: unique enough for span IDs, and cheap per
// host call).
type runIDs struct{}

func (runIDs) NewIDs(ctx context.Context) (trace.TraceID, trace.SpanID) {
	var tid trace.TraceID
	for !tid.IsValid() {
		binary.LittleEndian.PutUint64(tid[:8], rand.Uint64())
		binary.LittleEndian.PutUint64(tid[8:], rand.Uint64())
	}
	return tid, runIDs{}.NewSpanID(ctx, tid)
}

func (runIDs) NewSpanID(ctx context.Context, _ trace.TraceID) trace.SpanID {
	if id, ok := ctx.Value(spanIDKey{}).(trace.SpanID); ok {
		return id
	}
	var sid trace.SpanID
	for !sid.IsValid() {
		binary.LittleEndian.PutUint64(sid[:], rand.Uint64())
	}
	return sid
}

// export sends the span of one run, and its calls'.
func (o *OTLP) export(e Entry, took time.Duration, calls []host.TracedCall) {
	origin := chainID(e)
	sid := trace.SpanID(origin[16:24])
	if p, ok := o.parentOf(e); ok {
		sid = p
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID(origin[:16]), SpanID: sid,
		TraceFlags: trace.FlagsSampled, Remote: true})
	attrs := []attribute.KeyValue{attribute.String("ssrun.rule", e.Rule), attribute.String("ssrun.key", e.Key),
		attribute.String("ssrun.op", e.Op), attribute.String("ssrun.version", e.Version), attribute.String("ssrun.outcome", e.Outcome)}
	if e.ByRule != "" {
		attrs = append(attrs, attribute.String("ssrun.caused_by.rule", e.ByRule))
	}
	if e.ByClient != "" {
		attrs = append(attrs, attribute.String("ssrun.caused_by.client", e.ByClient))
	}
	if e.Origin != nil {
		attrs = append(attrs, attribute.String("ssrun.origin.key", e.Origin.Key), attribute.String("ssrun.origin.version", e.Origin.Version),
			attribute.String("ssrun.origin.client", e.Origin.Client))
	}
	ctx := context.WithValue(trace.ContextWithRemoteSpanContext(context.Background(), parent), spanIDKey{}, runSpanID(e.Rule, e.Key, e.Op, e.Version))
	ctx, span := o.tracer.Start(ctx, "rule "+e.Rule,
		trace.WithTimestamp(e.At), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	ctx = context.WithValue(ctx, spanIDKey{}, nil) // the calls' spans get IDs of their own
	for _, c := range calls {
		_, cs := o.tracer.Start(ctx, c.Verb, trace.WithTimestamp(c.At), trace.WithSpanKind(trace.SpanKindClient),
			trace.WithAttributes(attribute.String("ssrun.key", c.Key), attribute.String("ssrun.status", c.Status.String())))
		cs.End(trace.WithTimestamp(c.At.Add(c.Took)))
	}
	for _, w := range e.Writes {
		span.AddEvent("write", trace.WithAttributes(attribute.String("ssrun.op", w.Op), attribute.String("ssrun.key", w.Key),
			attribute.String("ssrun.version", w.Version)))
	}
	for _, d := range e.Denied {
		span.AddEvent("denied", trace.WithAttributes(attribute.String("ssrun.call", d)))
	}
	if e.Err != "" {
		span.SetStatus(codes.Error, e.Err)
	}
	span.End(trace.WithTimestamp(e.At.Add(took)))
}

// chainID derives the trace (the first 16 bytes) and origin span (the next
// 8) of e's chain: from its origin, else (a timer, a lost lock) from the
// run itself.
func chainID(e Entry) [32]byte {
	if o := e.Origin; o != nil {
		return sha256.Sum256([]byte("origin\x00" + o.Key + "\x00" + o.Version))
	}
	return sha256.Sum256([]byte("run\x00" + e.Rule + "\x00" + e.Key + "\x00" + e.Op + "\x00" + e.Version))
}

// Close sends what is pending, until ctx ends, and stops the export.
// Closing again does nothing and returns the first Close's error.
func (o *OTLP) Close(ctx context.Context) error {
	o.closeOnce.Do(func() {
		err := o.tp.Shutdown(ctx)
		if o.mp != nil {
			err = errors.Join(err, o.mp.Shutdown(ctx))
		}
		if err != nil {
			o.closeErr = fmt.Errorf("otlp: %w", err)
		}
	})
	return o.closeErr
}
