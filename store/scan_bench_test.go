package store

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
)

// BenchmarkScanPage: the time of one SCAN page, a pattern with a literal
// prefix and one without (1 key in 10 matches: a page examines its bound), in stores of 10,000 and 1,000,000 keys: a page's
// cost must not grow with the store (BENCHMARKS.md).
//
//	go test -run '^$' -bench '^BenchmarkScanPage$' -benchtime 2000x ./store
func BenchmarkScanPage(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		s := benchStore(b, n)
		for _, pattern := range []string{"k/0000000000*", "*7"} {
			b.Run(fmt.Sprintf("keys=%d/pattern=%s", n, pattern), func(b *testing.B) {
				req := Request{Payload: resp.EncodeRequest([]byte("SCAN"), []byte(pattern))}
				for b.Loop() {
					if r := s.Execute(req); len(r.Payload) < 4 {
						b.Fatal(string(r.Payload))
					}
				}
			})
		}
	}
}

// BenchmarkMemoryPerKey: the live heap of a store per key of 1,000,000 (a
// 16-byte key, a 16-byte value, all written by one client), the index
// included.
//
//	go test -run '^$' -bench '^BenchmarkMemoryPerKey$' -benchtime 1x ./store
func BenchmarkMemoryPerKey(b *testing.B) {
	for b.Loop() {
		before := liveHeap()
		s := benchStore(b, 1_000_000)
		b.ReportMetric(float64(liveHeap()-before)/1e6, "B/key")
		runtime.KeepAlive(s)
	}
}

func benchStore(b *testing.B, n int) *Store {
	b.Helper()
	now := time.Now()
	s := New(func() time.Time { return now }, Quota{Keys: -1, Bytes: -1})
	ts := hlc.HLC{Wall: now.UnixMilli(), Node: "bench"}.String()
	client := strings.Repeat("c", 23) // one connection's id, shared by its writes as the broker's are
	for i := range n {
		req := Request{Payload: resp.EncodeRequest([]byte("SET"), fmt.Appendf(nil, "k/%014d", i), []byte("value-0123456789")), TS: &ts, ClientID: client}
		if r := s.Execute(req); string(r.Payload) != "+OK\r\n" {
			b.Fatalf("SET: %q", r.Payload)
		}
	}
	return s
}

func liveHeap() uint64 {
	runtime.GC()
	m := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(m)
	return m[0].Value.Uint64()
}
