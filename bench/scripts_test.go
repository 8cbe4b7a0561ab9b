package bench

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/runtime/plugin"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// quietHost is abitest.Host without log retention (abitest keeps every
// line, which would grow without bound over millions of calls).
type quietHost struct{ *abitest.Host }

func (quietHost) Log(int32, string) {}

// benchValue is the value of bench/k, the key the verb loops read.
var benchValue = []byte("0123456789abcdef")

// subject is one runtime's bench rule started directly against an in-memory
// abitest store, without host or broker.
type subject struct {
	name  string
	store *abitest.Host
	s     abi.Script
}

// verbEvent makes the bench rules call verb n times.
func verbEvent(verb string, n int) abi.Event {
	return abi.Event{Key: "verb", Op: abi.OpSet, Value: []byte(verb + " " + strconv.Itoa(n))}
}

// noopEvent is the trivial event of the round trip.
var noopEvent = abi.Event{Key: "noop", Op: abi.OpSet, Value: []byte("v"), Version: "001732000000000:00001:StateStore"}

// asRule is the AssemblyScript SDK's test rule (built from its source by
// .ci/run's rebuild check); its "verb" command runs the bench verb loops.
const asRule = "../abi/guest/assemblyscript/testdata/verbs.wasm"

// startSubjects starts the Lua, WebAssembly (Go guest, AssemblyScript
// guest) and plugin bench rules, each on its own runtime and abitest store, with a call timeout
// that never stops a benchmark loop. Everything is closed when the test
// ends.
func startSubjects(tb testing.TB) []subject {
	tb.Helper()
	prebuild(tb, "A")
	ctx := context.Background()
	log := newLogger(tb)
	wasmRT, err := wasm.New(wasm.Config{CacheDir: sharedWasmCache(tb), Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	pluginRT, err := plugin.New(plugin.Config{Logger: log})
	if err != nil {
		tb.Fatal(err)
	}
	runtimes := []abi.Runtime{lua.New(lua.Config{}), wasmRT, pluginRT}
	tb.Cleanup(func() {
		for _, rt := range runtimes {
			if err := rt.Close(ctx); err != nil {
				tb.Errorf("close %s runtime: %v", rt.Kind(), err)
			}
		}
	})
	sources := []struct {
		subject string
		rt      abi.Runtime
		name    string
		src     []byte
	}{
		{"lua", runtimes[0], "rule.lua", luaRule(tb, "A")},
		{"wasm", wasmRT, "rule.wasm", wasmGuest(tb, "A")},
		// The AssemblyScript SDK's test rule runs the same verb loops.
		{"as", wasmRT, "verbs.wasm", readFile(tb, asRule)},
		{"plugin", pluginRT, pluginRule(tb), readFile(tb, pluginRule(tb))},
	}
	var out []subject
	for _, src := range sources {
		p, err := src.rt.Compile(ctx, src.name, src.src)
		if err != nil {
			tb.Fatalf("compile %s: %v", src.subject, err)
		}
		store := abitest.New()
		store.Put("bench/k", benchValue)
		startCtx, cancel := context.WithTimeout(ctx, time.Minute)
		s, err := p.Start(startCtx, quietHost{store}, abi.Limits{CallTimeout: time.Hour})
		cancel()
		if err != nil {
			tb.Fatalf("start %s: %v", src.subject, err)
		}
		tb.Cleanup(func() { _ = s.Close(ctx) }) // before the runtimes close
		out = append(out, subject{name: src.subject, store: store, s: s})
	}
	return out
}

// TestSubjectVerbs checks the verb loops the benchmarks time: each verb
// runs in every runtime with its expected outcome (a loop fails on any
// other) and reaches the store the expected number of times, and the
// round-trip event and the gRPC floor work.
func TestSubjectVerbs(t *testing.T) {
	ctx := context.Background()
	const n = 3
	for _, sub := range startSubjects(t) {
		verbs := abi.Verbs()
		if sub.name != "plugin" { // the plugin's floor is a bare gRPC call, below
			verbs = append([]string{"floor"}, verbs...)
		}
		for _, verb := range verbs {
			before := sub.store.Calls(verb)
			if err := sub.s.Handle(ctx, verbEvent(verb, n)); err != nil {
				t.Errorf("%s: %s x%d: %v", sub.name, verb, n, err)
				continue
			}
			want := n
			if verb == "floor" || verb == abi.FnLog { // log is dropped by quietHost before abitest counts it
				want = 0
			}
			if got := sub.store.Calls(verb) - before; got != want {
				t.Errorf("%s: %s x%d reached the store %d times, want %d", sub.name, verb, n, got, want)
			}
		}
		if v, _ := sub.store.Value("bench/k"); string(v) != string(benchValue) {
			t.Errorf("%s: bench/k = %q after the loops, want %q", sub.name, v, benchValue)
		}
		if err := sub.s.Handle(ctx, noopEvent); err != nil {
			t.Errorf("%s: noop event: %v", sub.name, err)
		}
		if err := sub.s.Handle(ctx, verbEvent("nosuchverb", 1)); err == nil {
			t.Errorf("%s: an unknown verb did not fail the event", sub.name)
		}
	}
	if err := startFloor(t).Ping(); err != nil {
		t.Errorf("grpc floor ping: %v", err)
	}
}

// TestSmallRule checks the hand-assembled module: it loads, watches its key
// at start, and handles an event.
func TestSmallRule(t *testing.T) {
	ctx := context.Background()
	rt, err := wasm.New(wasm.Config{CacheDir: sharedWasmCache(t), Logger: newLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(ctx)
	src := smallRule("small/in")
	p, err := rt.Compile(ctx, "small.wasm", src)
	if err != nil {
		t.Fatalf("compile the small module (%d bytes): %v", len(src), err)
	}
	store := abitest.New()
	s, err := p.Start(ctx, store, abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	if _, ok := store.Watches()["small/in"]; !ok || len(store.Watches()) != 1 {
		t.Errorf("watches after start = %v, want only small/in", store.Watches())
	}
	if err := s.Handle(ctx, abi.Event{Key: "small/in", Op: abi.OpSet, Value: []byte("x")}); err != nil {
		t.Errorf("handle: %v", err)
	}
}
