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
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
	promBridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	"google.golang.org/protobuf/encoding/protowire"
)

// OpenTelemetry export (--otlp-endpoint; off by default, and then nothing
// of it runs): a span per rule run, encoded and batched by otlpspans.go
// and posted over OTLP/HTTP, and the admin metrics, read from their
// Prometheus registry at each export by the official SDK. The runs of one
// chain (an outside change, the rules it set off, the rules their writes
// set off) share a trace, whose ID is derived from the chain's origin: the
// change's key and version; each run's span hangs under a span of that
// origin (not itself exported), or under the span of the run whose write
// caused it. A run's host calls (verb, key, status, time taken; never a
// value) and its writes are events of its span. With the SDK's spans, and
// a child span per call, the export cost about 5% of the throughput
// (BENCHMARKS.md, issue 30). --otlp-sample exports a share of the chains,
// each whole or not at all.

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
	spans *spanBatcher
	mp    *sdkmetric.MeterProvider // nil without metrics

	sampleAll   bool   // every chain
	sampleBound uint64 // else a chain whose trace ID's last 8 bytes, halved, are below it

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
	var mopts []otlpmetrichttp.Option
	mopts = append(mopts, otlpmetrichttp.WithEndpoint(hostport))
	scheme := "https://"
	if insecure {
		mopts, scheme = append(mopts, otlpmetrichttp.WithInsecure()), "http://"
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
	o.spans = newSpanBatcher(scheme+hostport+"/v1/traces", service, log)
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

// export encodes the span of one run, with its host calls, writes and
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
	sid := runSpanID(e.Rule, e.Key, e.Op, e.Version)
	end := unixNano(e.At.Add(took))
	var stack [1536]byte
	b := stack[:0]
	b = protowire.AppendTag(b, fSpanTraceID, protowire.BytesType)
	b = protowire.AppendBytes(b, tid[:])
	b = protowire.AppendTag(b, fSpanSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, sid[:])
	b = protowire.AppendTag(b, fSpanParentSpanID, protowire.BytesType)
	b = protowire.AppendBytes(b, parent[:])
	b = protowire.AppendTag(b, fSpanName, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(len("rule ")+len(e.Rule)))
	b = append(append(b, "rule "...), e.Rule...)
	b = protowire.AppendTag(b, fSpanKind, protowire.VarintType)
	b = protowire.AppendVarint(b, spanKindConsumer)
	b = protowire.AppendTag(b, fSpanStart, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, unixNano(e.At))
	b = protowire.AppendTag(b, fSpanEnd, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, end)
	b = appendKVString(b, fSpanAttributes, "ssrun.rule", e.Rule)
	b = appendKVString(b, fSpanAttributes, "ssrun.key", e.Key)
	b = appendKVString(b, fSpanAttributes, "ssrun.op", e.Op)
	b = appendKVString(b, fSpanAttributes, "ssrun.version", e.Version)
	b = appendKVString(b, fSpanAttributes, "ssrun.outcome", e.Outcome)
	if e.ByRule != "" {
		b = appendKVString(b, fSpanAttributes, "ssrun.caused_by.rule", e.ByRule)
	}
	if e.ByClient != "" {
		b = appendKVString(b, fSpanAttributes, "ssrun.caused_by.client", e.ByClient)
	}
	if e.Origin != nil {
		b = appendKVString(b, fSpanAttributes, "ssrun.origin.key", e.Origin.Key)
		b = appendKVString(b, fSpanAttributes, "ssrun.origin.version", e.Origin.Version)
		b = appendKVString(b, fSpanAttributes, "ssrun.origin.client", e.Origin.Client)
	}
	for _, c := range calls {
		status, us := c.Status.String(), c.Took.Microseconds()
		b = appendEventHead(b, unixNano(c.At), c.Verb, sizeKVString(fEventAttributes, "ssrun.key", c.Key)+
			sizeKVString(fEventAttributes, "ssrun.status", status)+sizeKVInt(fEventAttributes, "ssrun.took_us", us))
		b = appendKVString(b, fEventAttributes, "ssrun.key", c.Key)
		b = appendKVString(b, fEventAttributes, "ssrun.status", status)
		b = appendKVInt(b, fEventAttributes, "ssrun.took_us", us)
	}
	for _, w := range e.Writes {
		b = appendEventHead(b, end, "write", sizeKVString(fEventAttributes, "ssrun.op", w.Op)+
			sizeKVString(fEventAttributes, "ssrun.key", w.Key)+sizeKVString(fEventAttributes, "ssrun.version", w.Version))
		b = appendKVString(b, fEventAttributes, "ssrun.op", w.Op)
		b = appendKVString(b, fEventAttributes, "ssrun.key", w.Key)
		b = appendKVString(b, fEventAttributes, "ssrun.version", w.Version)
	}
	for _, d := range e.Denied {
		b = appendEventHead(b, end, "denied", sizeKVString(fEventAttributes, "ssrun.call", d))
		b = appendKVString(b, fEventAttributes, "ssrun.call", d)
	}
	if e.Err != "" {
		b = protowire.AppendTag(b, fSpanStatus, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fStatusMessage)+protowire.SizeBytes(len(e.Err))+
			protowire.SizeTag(fStatusCode)+protowire.SizeVarint(statusCodeError)))
		b = protowire.AppendTag(b, fStatusMessage, protowire.BytesType)
		b = protowire.AppendString(b, e.Err)
		b = protowire.AppendTag(b, fStatusCode, protowire.VarintType)
		b = protowire.AppendVarint(b, statusCodeError)
	}
	o.spans.add(b)
}

// appendEventHead appends the start of a span's event (its field, length,
// time and name); its attributes, attrs bytes in all, follow.
func appendEventHead(b []byte, at uint64, name string, attrs int) []byte {
	n := protowire.SizeTag(fEventTime) + 8 + protowire.SizeTag(fEventName) + protowire.SizeBytes(len(name)) + attrs
	b = protowire.AppendTag(b, fSpanEvents, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = protowire.AppendTag(b, fEventTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, at)
	b = protowire.AppendTag(b, fEventName, protowire.BytesType)
	return protowire.AppendString(b, name)
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
