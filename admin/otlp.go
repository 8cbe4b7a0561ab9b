package admin

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// OpenTelemetry export (--otlp-endpoint; off by default, and then nothing
// of it runs): a span per rule run, built as the official OTLP protobuf
// types, batched by otlpspans.go and uploaded by the official OTLP/HTTP
// client (otlptracehttp; it takes the OTEL_EXPORTER_OTLP_* variables:
// headers, TLS, compression, timeout; and retries), and the admin metrics,
// read from their Prometheus registry at each export by the official SDK. The runs of one
// chain (an outside change, the rules it set off, the rules their writes
// set off) share a trace, whose ID is derived from the chain's origin: the
// change's key and version; each run's span hangs under a span of that
// origin (not itself exported), or under the span of the run whose write
// caused it. A run's host calls (verb, key, status, time taken; never a
// value) and its writes are events of its span. With the SDK's spans, and
// a child span per call, the export cost about 5% of the throughput
// (BENCHMARKS.md, issue 30); the spans are now built without the SDK. --otlp-sample exports a share of the chains,
// each whole or not at all.

// OTLPConfig configures an OTLP export.
type OTLPConfig struct {
	// Endpoint is the collector's OTLP/HTTP address: http://HOST:PORT,
	// https://HOST:PORT, or HOST:PORT for http. It overrides
	// OTEL_EXPORTER_OTLP_ENDPOINT; the other OTEL_EXPORTER_OTLP_*
	// variables (headers, certificates, compression, timeout) apply.
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
	spans *spanBatcher
	mp    *sdkmetric.MeterProvider // nil without metrics

	sampleAll   bool   // every chain
	sampleBound uint64 // else a chain whose trace ID's last 8 bytes, halved, are below it

	names  sync.Map     // rule name: its runs' span name
	nNames atomic.Int64 // names stored, to bound them

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
	if cfg.Sample < 0 || cfg.Sample > 1 || math.IsNaN(cfg.Sample) {
		return nil, fmt.Errorf("otlp sample %v: want a ratio in (0, 1]", cfg.Sample)
	}
	mopts := []otlpmetrichttp.Option{otlpmetrichttp.WithEndpoint(hostport)}
	topts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(hostport)}
	scheme := "https://"
	if insecure {
		mopts, topts, scheme = append(mopts, otlpmetrichttp.WithInsecure()), append(topts, otlptracehttp.WithInsecure()), "http://"
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("otlp export failed", "endpoint", cfg.Endpoint, "err", err) }))
	service := cfg.Service
	if service == "" {
		service = "ssrun"
	}
	o := &OTLP{writers: map[writeKey]writer{}}
	if cfg.Sample == 0 || cfg.Sample == 1 {
		o.sampleAll = true
	} else {
		o.sampleBound = uint64(cfg.Sample * (1 << 63))
	}
	if cfg.Metrics != nil {
		mexp, err := otlpmetrichttp.New(ctx, mopts...)
		if err != nil {
			return nil, fmt.Errorf("otlp metrics: %w", err)
		}
		interval := cfg.MetricsInterval
		if interval <= 0 {
			interval = 15 * time.Second
		}
		reader := sdkmetric.NewPeriodicReader(mexp, sdkmetric.WithInterval(interval),
			sdkmetric.WithProducer(promBridge.NewMetricProducer(promBridge.WithGatherer(cfg.Metrics.reg))))
		res := resource.NewSchemaless(attribute.String("service.name", service))
		o.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	}
	if o.spans, err = newSpanBatcher(ctx, otlptracehttp.NewClient(topts...), scheme+hostport, service, log); err != nil {
		if o.mp != nil {
			_ = o.mp.Shutdown(ctx) // nothing was sent
		}
		return nil, err
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
func (o *OTLP) parentOf(e Entry) ([8]byte, bool) {
	if e.ByRule == "" || e.Origin == nil { // without an origin, writer and run are in traces of their own
		return [8]byte{}, false
	}
	o.mu.Lock()
	w, ok := o.writers[writeKey{e.Key, e.Version}]
	o.mu.Unlock()
	if !ok || w.rule != e.ByRule {
		return [8]byte{}, false
	}
	return runSpanID(w.rule, w.cause.Key, w.cause.Op, w.cause.Version), true
}

// runSpanID derives the span ID of rule's run on an event.
func runSpanID(rule, key, op, version string) [8]byte {
	h := hashOf("span", rule, key, op, version)
	return [8]byte(h[:8])
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

// export builds the span of one run, with its host calls, writes and
// refused calls as its events, and adds it to the batch.
func (o *OTLP) export(e Entry, took time.Duration, calls []host.TracedCall) {
	origin := chainID(e)
	tid := [16]byte(origin[:16])
	if !o.sampled(tid) {
		return
	}
	parent := [8]byte(origin[16:24])
	if p, ok := o.parentOf(e); ok {
		parent = p
	}
	strs := 5 + 2*len(calls) + 3*len(e.Writes) + len(e.Denied)
	if e.ByRule != "" {
		strs++
	}
	if e.ByClient != "" {
		strs++
	}
	if e.Origin != nil {
		strs += 3
	}
	s := newRunSpan(strs, len(calls), len(calls)+len(e.Writes)+len(e.Denied))
	copy(s.ids[:16], tid[:])
	sid := runSpanID(e.Rule, e.Key, e.Op, e.Version)
	copy(s.ids[16:24], sid[:])
	copy(s.ids[24:], parent[:])
	end := unixNano(e.At.Add(took))
	sp := &s.span
	sp.TraceId, sp.SpanId, sp.ParentSpanId = s.ids[:16:16], s.ids[16:24:24], s.ids[24:32:32]
	sp.Name, sp.Kind = o.spanName(e.Rule), tracepb.Span_SPAN_KIND_CONSUMER
	sp.StartTimeUnixNano, sp.EndTimeUnixNano = unixNano(e.At), end
	s.str("ssrun.rule", e.Rule)
	s.str("ssrun.key", e.Key)
	s.str("ssrun.op", e.Op)
	s.str("ssrun.version", e.Version)
	s.str("ssrun.outcome", e.Outcome)
	if e.ByRule != "" {
		s.str("ssrun.caused_by.rule", e.ByRule)
	}
	if e.ByClient != "" {
		s.str("ssrun.caused_by.client", e.ByClient)
	}
	if e.Origin != nil {
		s.str("ssrun.origin.key", e.Origin.Key)
		s.str("ssrun.origin.version", e.Origin.Version)
		s.str("ssrun.origin.client", e.Origin.Client)
	}
	sp.Attributes = s.attrsFrom(0)
	for _, c := range calls {
		ev, from := s.event(unixNano(c.At), c.Verb), s.nkv
		s.str("ssrun.key", c.Key)
		s.str("ssrun.status", c.Status.String())
		s.int("ssrun.took_us", c.Took.Microseconds())
		ev.Attributes = s.attrsFrom(from)
	}
	for _, w := range e.Writes {
		ev, from := s.event(end, "write"), s.nkv
		s.str("ssrun.op", w.Op)
		s.str("ssrun.key", w.Key)
		s.str("ssrun.version", w.Version)
		ev.Attributes = s.attrsFrom(from)
	}
	for _, d := range e.Denied {
		ev, from := s.event(end, "denied"), s.nkv
		s.str("ssrun.call", d)
		ev.Attributes = s.attrsFrom(from)
	}
	if s.nev > 0 {
		sp.Events = s.events[:s.nev:s.nev]
	}
	if e.Err != "" {
		s.status.Message, s.status.Code = e.Err, tracepb.Status_STATUS_CODE_ERROR
		sp.Status = &s.status
	}
	o.spans.add(s)
}

// maxSpanNames bounds the span names o keeps ("rule " and the rule's
// name, made once per rule).
const maxSpanNames = 1024

// spanName is the name of rule's runs' spans.
func (o *OTLP) spanName(rule string) string {
	if n, ok := o.names.Load(rule); ok {
		return n.(string)
	}
	n := "rule " + rule
	if o.nNames.Add(1) <= maxSpanNames {
		o.names.Store(rule, n)
	}
	return n
}

// sampled reports whether the chain of trace tid is exported: the same
// answer for every run of a chain, whose runs share the trace ID (the
// test of the SDK's TraceIDRatioBased, on the ID's last 8 bytes).
func (o *OTLP) sampled(tid [16]byte) bool {
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
		err := o.spans.close(ctx)
		if o.mp != nil {
			err = errors.Join(err, o.mp.Shutdown(ctx))
		}
		if err != nil {
			o.closeErr = fmt.Errorf("otlp: %w", err)
		}
	})
	return o.closeErr
}

// unixNano is t for OTLP: nanoseconds since the epoch.
func unixNano(t time.Time) uint64 { return uint64(t.UnixNano()) }
