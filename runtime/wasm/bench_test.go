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

// BenchmarkVerbs: each verb called b.N times by the Go guest, in events
// of 256 calls, against benchHost (abitest.Host's store, package store's
// engine, without the test double's bookkeeping; its own cost per call is
// abitest's BenchmarkStore). The floor is the bare host call: the guest
// calls last_error with a zero-length buffer (a real ABI host
// function that looks up the caller and writes 4 bytes, nothing else), in
// an event of 256 calls just before each of the verb's (not timed in
// ns/op). x-floor is the verb's fastest event over the floor's fastest,
// the pair least disturbed by other processes on a shared machine. Rows
// named a+b do both verbs per iteration (set+del, set+vdel, watch+unwatch,
// lock+unlock and timer+cancel need something to remove); "timer" re-arms
// one name; "set-literal" builds its value in the call; "del", "unwatch",
// "unlock" and "cancel" fail with NOT_FOUND, "vdel" with NOT_APPLIED;
// raw-get, raw-set and raw-del are get, set and the failing del as bare
// host calls without the SDK (the host's, the engine's and the store's
// share of a verb). The rule picks the verb once per event, so no row pays a
// per-call dispatch the floor does not.
func BenchmarkVerbs(b *testing.B) {
	h := newBenchHost()
	h.Put("bench/k", []byte("0123456789abcdef"))
	s := start(b, compile(b, sharedRuntime(b), "rule.wasm", guest(b, "rule")), h, abi.Limits{CallTimeout: time.Hour})
	for _, verb := range append([]string{"floor"}, benchVerbs...) {
		b.Run(verb, func(b *testing.B) {
			b.ReportAllocs()
			var floor, took fastest
			for done := 0; done < b.N; done += verbChunk {
				n := min(verbChunk, b.N-done)
				b.StopTimer()
				f := benchLoop(b, s, "floor", n)
				b.StartTimer()
				d := benchLoop(b, s, verb, n)
				if n == verbChunk {
					floor.add(f)
					took.add(d)
				}
			}
			if floor > 0 {
				b.ReportMetric(float64(took)/float64(floor), "x-floor")
			}
		})
	}
}

// benchVerbs are the rows of the verb benchmarks (the test rule's bench
// command picks the verb once per event, then loops over it alone).
var benchVerbs = []string{"get", "set", "set-literal", "set+del", "set+vdel", "watch", "watch+unwatch", "unwatch", "lock", "lock+unlock", "unlock",
	"log", "timer", "timer+cancel", "cancel", "now", "del", "vdel", "raw-get", "raw-set", "raw-del"}

// verbChunk is the number of calls in one timed event of the verb
// benchmarks.
const verbChunk = 256

// benchLoop times one event in which s calls verb n times (the test rule's
// bench command).
func benchLoop(b *testing.B, s abi.Script, verb string, n int) time.Duration {
	t0 := time.Now()
	if err := s.Handle(context.Background(), command("bench", verb, strconv.Itoa(n))); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}

// fastest keeps the shortest of the times it is given (0: none yet).
type fastest time.Duration

func (f *fastest) add(d time.Duration) {
	if *f == 0 || fastest(d) < *f {
		*f = fastest(d)
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

// BenchmarkGuestSteps: what the Go guest's elementary steps cost, in
// floors (the bare host call of BenchmarkVerbs): a call of a function
// that calls nothing, sync.Mutex Lock+Unlock, a function that unlocks with
// defer, a function with the SDK's flag guard (it calls on its slow path:
// a function that calls costs far more than one that does not) and that
// guard inline; the get host call inline, in a function of its own, and
// in a function returning a Value as Get does; heap allocations of 16 and
// 64 bytes, a 16-byte string conversion. Each row times events of
// 256 steps, of 256 floor calls and of the empty loop, interleaved, and
// takes the fastest of each; floors is (step - empty) / (floor - empty),
// so the event's own cost (about 100 ns a step) is in neither.
//
// A function that calls costs more than one that does not because Go's
// wasm port opens it with a loop (its resume points), and every loop header
// has an interrupt check (see instrument; with wazero's
// WithCloseOnContextDone, used before, that check was a return to Go and
// cost far more).
func BenchmarkGuestSteps(b *testing.B) {
	h := newBenchHost()
	h.Put("bench/k", []byte("0123456789abcdef"))
	s := start(b, compile(b, sharedRuntime(b), "rule.wasm", guest(b, "rule")), h, abi.Limits{CallTimeout: time.Hour})
	for _, name := range []string{"call", "mutex", "defer", "flag", "flag-inline", "rawget-inline", "rawget-fn", "rawget-ret", "alloc16", "alloc64", "string16"} {
		b.Run(name, func(b *testing.B) {
			var empty, floor, took fastest
			for done := 0; done+verbChunk <= max(b.N, verbChunk); done += verbChunk {
				empty.add(stepLoop(b, s, "empty"))
				floor.add(stepLoop(b, s, "floor"))
				took.add(stepLoop(b, s, name))
			}
			b.ReportMetric(float64(took-empty)/verbChunk, "ns/step")
			b.ReportMetric(float64(floor-empty)/verbChunk, "floor-ns")
			b.ReportMetric(float64(took-empty)/float64(floor-empty), "floors")
		})
	}
}

// stepLoop times one event in which s runs step name verbChunk times.
func stepLoop(b *testing.B, s abi.Script, name string) time.Duration {
	t0 := time.Now()
	if err := s.Handle(context.Background(), command("step", name, strconv.Itoa(verbChunk))); err != nil {
		b.Fatal(err)
	}
	return time.Since(t0)
}
