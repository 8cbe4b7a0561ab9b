package plugin

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// BenchmarkPlugin measures, on one plugin process over AutoMTLS unix
// sockets:
//
//   - floor: a bare gRPC unary call host -> plugin on the same connection
//     (go-plugin's health check), the floor of any plugin call;
//   - handle: Script.Handle of a trivial event (host -> plugin -> answer,
//     on the plugin's session);
//   - verb-<v>: one ABI verb called from the plugin (plugin -> host, up the
//     session -> in-memory abi.Host -> answer), measured as a loop of b.N
//     calls inside one event, divided by b.N.
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

// BenchmarkSession compares the three ways an event reaches a plugin
// process of the test plugin: down its session on the raw channel (the
// default), down its session on the gRPC Session stream (the raw channel
// not offered), and in a Handle call (one RPC per event and per host call,
// as with a plugin that predates the session). The event is the end-to-end
// benchmark rule's shape: two host calls (a set, then a get). The three
// processes take turns in chunks of 100 events, so all see the same
// machine load; one op is one event of each. Reports, per event, for way
// session, grpc and unary: <way>-us/ev (elapsed), <way>-cpu-us/ev (the CPU
// time of the host process and of the plugin process while it ran its
// chunks) and <way>-cs/ev (their threads' context switches; Linux; load on
// the machine makes an event wait but not work or switch more, so these
// are the steadier measures); and the ratios session-x-unary and
// session-x-grpc of elapsed times.
func BenchmarkSession(b *testing.B) {
	const chunk = 100
	h := abitest.New()
	lim := abi.Limits{CallTimeout: time.Minute}
	ways := []string{"session", "grpc", "unary"}
	scripts := make([]*script, len(ways))
	for i, way := range ways {
		r, _ := newRuntime(b, Config{Logger: quietLogger()})
		r.grpcSession, r.unaryOnly = way == "grpc", way == "unary"
		scripts[i] = start(b, compile(b, r, rulePlugin(b)), h, lim)
		ss := scripts[i].cur.sess
		if ss == nil {
			if way != "unary" {
				b.Fatalf("process %s: no session", way)
			}
			continue
		}
		if raw := ss.rawc != nil; way == "unary" || raw != (way == "session") {
			b.Fatalf("process %s: a session, on the raw channel: %t", way, raw)
		}
	}
	ev := command("loop", abi.FnGet, "1")
	ctx := context.Background()
	costs := testutil.Interleaved(b, len(scripts), chunk, func(i int) int { return int(scripts[i].pid.Load()) }, func(i, n int) time.Duration {
		t0 := time.Now()
		for range n {
			if err := scripts[i].Handle(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(t0)
	})
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 / float64(b.N) }
	for i, way := range ways {
		b.ReportMetric(us(costs[i].Elapsed), way+"-us/ev")
		if costs[0].CPU > 0 {
			b.ReportMetric(us(costs[i].CPU), way+"-cpu-us/ev")
			b.ReportMetric(float64(costs[i].Switches)/float64(b.N), way+"-cs/ev")
		}
	}
	b.ReportMetric(float64(costs[0].Elapsed)/float64(costs[2].Elapsed), "session-x-unary")
	b.ReportMetric(float64(costs[0].Elapsed)/float64(costs[1].Elapsed), "session-x-grpc")
}
