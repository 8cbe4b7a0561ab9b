package admin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
)

// BenchmarkOTLPExportRun is the export's CPU cost per rule run, free of
// the machine's other load: one run's span (a GET and a SET, one write)
// built, batched, encoded and posted to a collector stub on loopback: the
// batch is flushed every 512 runs (the SDK's batch size) inside the
// timing, so every span is sent and its encoding counted.
//
//	go test -run '^$' -bench '^BenchmarkOTLPExportRun$' -benchmem ./admin
func BenchmarkOTLPExportRun(b *testing.B) {
	o, entries, calls := newBenchExport(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; b.Loop(); i++ {
		o.export(entries[i%len(entries)], 250*time.Microsecond, calls)
		if i%512 == 511 {
			if err := o.spans.flush(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := o.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOTLPExportBuild is the part of BenchmarkOTLPExportRun on the
// rule's goroutine: the span built and queued; every 512 runs the batch
// is taken back to the pool without being encoded or sent.
//
//	go test -run '^$' -bench '^BenchmarkOTLPExportBuild$' -benchmem ./admin
func BenchmarkOTLPExportBuild(b *testing.B) {
	o, entries, calls := newBenchExport(b)
	for i := 0; b.Loop(); i++ {
		o.export(entries[i%len(entries)], 250*time.Microsecond, calls)
		if i%512 == 511 {
			o.spans.mu.Lock()
			batch := o.spans.pending
			o.spans.pending = nil
			o.spans.mu.Unlock()
			for _, s := range batch {
				s.release()
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := o.Close(ctx); err != nil {
		b.Fatal(err)
	}
}

// newBenchExport is an export to a collector stub on loopback, 1,024 runs
// of a GET→SET rule and the host calls of each.
func newBenchExport(b *testing.B) (*OTLP, []Entry, []host.TracedCall) {
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.Copy(io.Discard, r.Body) }))
	b.Cleanup(col.Close)
	o, err := NewOTLP(context.Background(), OTLPConfig{Endpoint: col.URL})
	if err != nil {
		b.Fatal(err)
	}
	at := time.Now()
	entries := make([]Entry, 1024)
	for i := range entries {
		v := fmt.Sprintf("%d:0:StateStore", at.UnixMilli()+int64(i))
		entries[i] = Entry{At: at, Kind: "run", Rule: "copy.lua", Key: "copy/in", Op: "SET", Version: v, ByClient: "bench-driver",
			Outcome: OutcomeHandled, Writes: []provenance.Step{{Op: "SET", Key: "copy/out", Version: v}},
			Origin: &provenance.Origin{Key: "copy/in", Version: v, Client: "bench-driver"}}
	}
	calls := []host.TracedCall{{Verb: "get", Key: "copy/in", Status: abi.StatusOK, At: at, Took: 80 * time.Microsecond},
		{Verb: "set", Key: "copy/out", Status: abi.StatusOK, At: at.Add(90 * time.Microsecond), Took: 120 * time.Microsecond}}
	b.ReportAllocs()
	return o, entries, calls
}
