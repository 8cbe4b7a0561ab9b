package broker_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/resp"
)

// BenchmarkPersistence measures SET round trips against four brokers in
// one run: in memory (the baseline) and with a data directory under each
// fsync policy. They alternate in chunks so that the ratios hold on a
// machine whose load drifts, in a random order each time, since the
// fsync of one slows the disk writes of the one after it.
//
//   - inflight-64: 64 requests in flight (4 connections × 16); metrics
//     <config>-req/s and <config>-x-memory (throughput ratio).
//   - inflight-1: one request at a time; metrics <config>-p50-µs and
//     <config>-p50-x-memory (latency ratio).
//
// go test -run '^$' -bench '^BenchmarkPersistence$' -benchtime 20000x -count 3 ./broker
func BenchmarkPersistence(b *testing.B) {
	configs := []struct {
		name   string
		policy broker.FsyncPolicy
		data   bool
	}{
		{"memory", 0, false},
		{"always", broker.FsyncAlways, true},
		{"interval", broker.FsyncInterval, true},
		{"never", broker.FsyncNever, true},
	}
	const conns = 4
	clients := make([][]*client, len(configs))
	for i, cfg := range configs {
		opts := []func(*broker.Config){func(c *broker.Config) { c.Logger = slog.New(slog.DiscardHandler) }}
		if cfg.data {
			opts = append(opts, withData(b.TempDir(), cfg.policy))
		}
		br := brokertest.Start(b, opts...)
		for range conns {
			clients[i] = append(clients[i], dial(b, br))
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	value := []byte("0123456789abcdef0123456789abcdef")
	var seq atomic.Int64
	set := func(c *client) error {
		key := fmt.Appendf(nil, "bench-%04d", seq.Add(1)%1000)
		p := c.request(resp.EncodeRequest([]byte("SET"), key, value))
		r, _, err := c.exchange(context.Background(), p)
		if err == nil && string(r.payload) != "+OK\r\n" {
			err = fmt.Errorf("SET: %q", r.payload)
		}
		return err
	}

	b.Run("inflight-64", func(b *testing.B) {
		const chunk = 512
		elapsed := make([]time.Duration, len(configs))
		b.ResetTimer()
		for done := 0; done < b.N; done += chunk {
			n := min(chunk, b.N-done)
			for _, i := range rng.Perm(len(configs)) {
				cs := clients[i] // 16 requests in flight on each
				elapsed[i] += testutil.InFlight(b, 16*len(cs), n, func(w, _ int) error { return set(cs[w%len(cs)]) })
			}
		}
		b.StopTimer()
		testutil.ReportRates(b, elapsed, func(i int) string { return configs[i].name }, "-req/s", "-x-memory")
	})
	b.Run("inflight-1", func(b *testing.B) {
		lat := make([][]time.Duration, len(configs))
		b.ResetTimer()
		for range b.N {
			for _, i := range rng.Perm(len(configs)) {
				t0 := time.Now()
				if err := set(clients[i][0]); err != nil {
					b.Fatal(err)
				}
				lat[i] = append(lat[i], time.Since(t0))
			}
		}
		b.StopTimer()
		p50 := make([]float64, len(configs))
		for i, cfg := range configs {
			slices.Sort(lat[i])
			p50[i] = float64(lat[i][len(lat[i])/2]) / float64(time.Microsecond)
			b.ReportMetric(p50[i], cfg.name+"-p50-µs")
			if i > 0 {
				b.ReportMetric(p50[i]/p50[0], cfg.name+"-p50-x-memory")
			}
		}
	})
}
