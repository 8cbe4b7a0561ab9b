package plugin

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// BenchmarkPlugin measures, on one plugin process over AutoMTLS unix
// sockets:
//
//   - floor: a bare gRPC unary call host -> plugin on the same connection
//     (go-plugin's health check), the floor of any plugin call;
//   - handle: Script.Handle of a trivial event (host -> plugin -> answer);
//   - verb-<v>: one ABI verb called from the plugin (plugin -> host's
//     callback service -> in-memory abi.Host -> answer), measured as a loop
//     of b.N calls inside one event, divided by b.N.
//
// Each result after the floor also reports x-floor: its time per operation
// divided by the floor measured just before it with the same b.N, so the
// pair sees the same machine load.
func BenchmarkPlugin(b *testing.B) {
	r, _ := newRuntime(b, Config{Logger: quietLogger()})
	s := start(b, compile(b, r, rulePlugin(b)), abitest.New(), abi.Limits{CallTimeout: 10 * time.Minute})
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	ctx := context.Background()
	ping := func(b *testing.B, n int) time.Duration {
		start := time.Now()
		for range n {
			if err := p.rpc.Ping(); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	// paired times op(b.N) and reports it against the floor of b.N pings.
	paired := func(b *testing.B, op func(n int)) {
		floor := ping(b, b.N)
		b.ResetTimer()
		op(b.N)
		b.StopTimer()
		b.ReportMetric(float64(b.Elapsed())/float64(floor), "x-floor")
	}

	b.Run("floor", func(b *testing.B) { ping(b, b.N) })
	b.Run("handle", func(b *testing.B) {
		ev := command("noop")
		paired(b, func(n int) {
			for range n {
				if err := s.Handle(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	})
	for _, verb := range abi.Verbs() {
		b.Run("verb-"+verb, func(b *testing.B) {
			paired(b, func(n int) {
				if err := s.Handle(ctx, command("loop", verb, strconv.Itoa(n))); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

// BenchmarkStart measures starting a plugin (process start, handshake,
// init) and closing it (graceful shutdown), one at a time.
func BenchmarkStart(b *testing.B) {
	r, _ := newRuntime(b, Config{Logger: quietLogger()})
	p := compile(b, r, rulePlugin(b))
	h := abitest.New()
	ctx := context.Background()
	b.ResetTimer()
	for range b.N {
		s, err := p.Start(ctx, h, abi.Limits{CallTimeout: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
