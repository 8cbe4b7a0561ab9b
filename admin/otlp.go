package admin

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
// exported), or under the span of the run whose write caused it. A run's
// host calls (verb, key, status, time taken; never a value) and its writes
// are events of its span: a child span per call cost a third of the
// throughput budget (BENCHMARKS.md, issue 30). --otlp-sample exports a
// share of the chains, each whole or not at all.

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
	// Sample is the share of chains exported, in (0, 1]; 0 is 1. Every
	// run of a chain is exported or none: the choice is made on the
	// chain's trace ID, derived from its origin.
	Sample float64
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

	sampleAll   bool   // every chain
	sampleBound uint64 // else a chain whose trace ID's last 8 bytes, halved, are below it

	mu      sync.Mutex
	writers map[writeKey]writer // the run that made each recent write in a handler
	order   []writeKey          // writers' keys, oldest first, to bound it
	next    int                 // where in order the next write goes once full
	names   map[string]string   // rule -> its span's name

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
	if cfg.Sample < 0 || cfg.Sample > 1 || math.IsNaN(cfg.Sample) {
		return nil, fmt.Errorf("otlp sample %v: want a ratio in (0, 1]", cfg.Sample)
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
		writers: map[writeKey]writer{}, names: map[string]string{}}
	if cfg.Sample == 0 || cfg.Sample == 1 {
		o.sampleAll = true
	} else {
		o.sampleBound = uint64(cfg.Sample * (1 << 63))
	}
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
	h := hashOf("span", rule, key, op, version)
	return trace.SpanID(h[:8])
}

// hashOf is the SHA-256 of parts joined by NULs, built on the stack when
// short (no allocation per run).
func hashOf(parts ...string) [32]byte {
	var buf [256]byte
	b := buf[:0]
	for i, p := range parts {
		if i > 0 {
			b = append(b, 0)
		}
		b = append(b, p...)
	}
	return sha256.Sum256(b)
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

// export sends the span of one run: its host calls and writes are events
// of it (a span each cost a third of the throughput's 5% budget).
func (o *OTLP) export(e Entry, took time.Duration, calls []host.TracedCall) {
	origin := chainID(e)
	tid := trace.TraceID(origin[:16])
	if !o.sampled(tid) {
		return
	}
	sid := trace.SpanID(origin[16:24])
	if p, ok := o.parentOf(e); ok {
		sid = p
	}
	parent := trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid,
		TraceFlags: trace.FlagsSampled, Remote: true})
	attrs := make([]attribute.KeyValue, 0, 10)
	attrs = append(attrs, attribute.String("ssrun.rule", e.Rule), attribute.String("ssrun.key", e.Key),
		attribute.String("ssrun.op", e.Op), attribute.String("ssrun.version", e.Version), attribute.String("ssrun.outcome", e.Outcome))
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
	_, span := o.tracer.Start(ctx, o.spanName(e.Rule),
		trace.WithTimestamp(e.At), trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	for _, c := range calls {
		span.AddEvent(c.Verb, trace.WithTimestamp(c.At), trace.WithAttributes(attribute.String("ssrun.key", c.Key),
			attribute.String("ssrun.status", c.Status.String()), attribute.Int64("ssrun.took_us", c.Took.Microseconds())))
	}
	end := trace.WithTimestamp(e.At.Add(took))
	for _, w := range e.Writes {
		span.AddEvent("write", end, trace.WithAttributes(attribute.String("ssrun.op", w.Op), attribute.String("ssrun.key", w.Key),
			attribute.String("ssrun.version", w.Version)))
	}
	for _, d := range e.Denied {
		span.AddEvent("denied", end, trace.WithAttributes(attribute.String("ssrun.call", d)))
	}
	if e.Err != "" {
		span.SetStatus(codes.Error, e.Err)
	}
	span.End(end)
}

// spanName returns "rule R", made once per rule.
func (o *OTLP) spanName(rule string) string {
	o.mu.Lock()
	defer o.mu.Unlock()
	n, ok := o.names[rule]
	if !ok {
		if len(o.names) >= maxWriters { // rules come and go: start again rather than grow
			clear(o.names)
		}
		n = "rule " + rule
		o.names[rule] = n
	}
	return n
}

// sampled reports whether the chain of trace tid is exported: the same
// answer for every run of a chain, whose runs share the trace ID (the
// test of the SDK's TraceIDRatioBased, on the ID's last 8 bytes).
func (o *OTLP) sampled(tid trace.TraceID) bool {
	return o.sampleAll || binary.BigEndian.Uint64(tid[8:16])>>1 < o.sampleBound
}

// chainID derives the trace (the first 16 bytes) and origin span (the next
// 8) of e's chain: from its origin, else (a timer, a lost lock) from the
// run itself.
func chainID(e Entry) [32]byte {
	if o := e.Origin; o != nil {
		return hashOf("origin", o.Key, o.Version)
	}
	return hashOf("run", e.Rule, e.Key, e.Op, e.Version)
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
