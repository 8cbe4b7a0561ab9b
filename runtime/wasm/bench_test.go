package wasm

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// benchHost is abitest.Host with Log dropped: abitest keeps every line,
// which would grow without bound over millions of calls.
type benchHost struct{ *abitest.Host }

func (benchHost) Log(int32, string) {}

// BenchmarkVerbs: each verb called b.N times by the Go guest inside one
// event, against abitest.Host. "floor" is the bare host-call floor: the
// guest calls last_error with a zero-length buffer (a real ABI host
// function that looks up the caller and writes 4 bytes, nothing else), so
// the other rows minus the floor are SDK + argument copying + abitest.
// Rows named a+b do both verbs per iteration (del, vdel, unwatch, unlock
// and cancel need something to remove); "timer" re-arms one name. Each row
// also reports its ratio to the floor.
func BenchmarkVerbs(b *testing.B) {
	h := benchHost{abitest.New()}
	h.Put("bench/k", []byte("0123456789abcdef"))
	s := start(b, compile(b, sharedRuntime(b), "rule.wasm", guest(b, "rule")), h, abi.Limits{CallTimeout: time.Hour})
	var floor float64
	for _, verb := range []string{"floor", "get", "set", "set+del", "set+vdel", "watch", "watch+unwatch", "lock", "lock+unlock", "log",
		"timer", "timer+cancel", "now"} {
		b.Run(verb, func(b *testing.B) {
			b.ReportAllocs()
			b.ResetTimer()
			if err := s.Handle(context.Background(), command("bench", verb, strconv.Itoa(b.N))); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			if verb == "floor" {
				floor = ns
			} else if floor > 0 {
				b.ReportMetric(ns/floor, "x-floor")
			}
		})
	}
}

// BenchmarkHandle: one trivial event (ssrun_alloc + write + ssrun_on_event
// under a fresh deadline), Go guest vs a hand-written guest.
func BenchmarkHandle(b *testing.B) {
	for _, tc := range []struct {
		name string
		src  func() []byte
		ev   abi.Event
	}{
		{"go", func() []byte { return guest(b, "rule") }, command("noop")},
		{"hand", func() []byte { return handGuest(nil).bytes() }, command("noop")},
	} {
		b.Run(tc.name, func(b *testing.B) {
			s := start(b, compile(b, sharedRuntime(b), tc.name+".wasm", tc.src()), abitest.New(), abi.Limits{})
			b.ReportAllocs()
			for b.Loop() {
				if err := s.Handle(context.Background(), tc.ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// guestKind is a guest the per-instance benchmarks compare.
type guestKind struct {
	name string
	src  func() []byte
}

// guestKinds are the Go test guest and a hand-written one.
func guestKinds(b *testing.B) []guestKind {
	return []guestKind{
		{"go", func() []byte { return guest(b, "rule") }},
		{"hand", func() []byte { return handGuest(nil).bytes() }},
	}
}

// BenchmarkStart: instantiate + _initialize (+ Close), Go guest vs a
// hand-written guest.
func BenchmarkStart(b *testing.B) {
	for _, tc := range guestKinds(b) {
		b.Run(tc.name, func(b *testing.B) {
			p := compile(b, sharedRuntime(b), tc.name+".wasm", tc.src())
			h := abitest.New()
			b.ReportAllocs()
			for b.Loop() {
				s, err := p.Start(context.Background(), h, abi.Limits{})
				if err != nil {
					b.Fatal(err)
				}
				_ = s.Close(context.Background())
			}
		})
	}
}

// BenchmarkCompile: the Go guest compiled cold (fresh cache directory) and
// from the on-disk cache (a fresh Runtime over a warm directory: wazero
// decodes, validates and loads the code). Both include the load check (one
// instantiation and _initialize).
func BenchmarkCompile(b *testing.B) {
	src := guest(b, "rule")
	compileIn := func(b *testing.B, dir string) {
		r, err := New(Config{CacheDir: dir, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := r.Compile(context.Background(), "rule.wasm", src); err != nil {
			b.Fatal(err)
		}
		_ = r.Close(context.Background())
	}
	b.Run("cold", func(b *testing.B) {
		for b.Loop() {
			compileIn(b, b.TempDir())
		}
	})
	b.Run("cached", func(b *testing.B) {
		dir := b.TempDir()
		compileIn(b, dir)
		for b.Loop() {
			compileIn(b, dir)
		}
	})
}

// BenchmarkMemoryPerScript: live heap per started Script (wasm linear
// memory, wazero instance state, buffers), from runtime.MemStats over 16
// Starts.
func BenchmarkMemoryPerScript(b *testing.B) {
	for _, tc := range guestKinds(b) {
		b.Run(tc.name, func(b *testing.B) {
			p := compile(b, sharedRuntime(b), tc.name+".wasm", tc.src())
			const n = 16
			var perScript float64
			for b.Loop() {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				scripts := make([]abi.Script, n)
				for i := range scripts {
					s, err := p.Start(context.Background(), abitest.New(), abi.Limits{})
					if err != nil {
						b.Fatal(err)
					}
					scripts[i] = s
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perScript = (float64(after.HeapAlloc) - float64(before.HeapAlloc)) / n
				for _, s := range scripts {
					_ = s.Close(context.Background())
				}
			}
			b.ReportMetric(perScript, "heap-B/script")
		})
	}
}
