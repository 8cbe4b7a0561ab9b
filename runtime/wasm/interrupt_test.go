package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// withHelper returns handGuest(onEvent) with one more function, not
// exported, of type (i32) -> (i32), and its index (which is also the index
// of its type: wModule gives each function a type of its own).
func withHelper(onEvent func(helper int) []byte, body []byte) []byte {
	m := handGuest(nil)
	helper := len(m.imports) + len(m.funcs)
	m = m.withFunc(wFunc{export: abi.ExportOnEvent, params: []api.ValueType{i32, i32}, results: []api.ValueType{i32}, body: onEvent(helper)})
	m.funcs = append(m.funcs, wFunc{params: []api.ValueType{i32}, results: []api.ValueType{i32}, body: body})
	return m.bytes()
}

// TestInterruptRecursion: a guest in a loop-free exponential recursion is
// stopped at its deadline (wazero's WithCloseOnContextDone checks only at
// loop headers and never stopped it), and the script recovers.
func TestInterruptRecursion(t *testing.T) {
	m := handGuest(nil)
	fib := len(m.imports) + len(m.funcs) // withHelper's function
	body := ops(localGet(0), i32c(2), []byte{0x48, 0x04, 0x7f}, localGet(0), []byte{0x05},
		localGet(0), i32c(1), []byte{0x6b}, call(fib),
		localGet(0), i32c(2), []byte{0x6b}, call(fib),
		[]byte{0x6a, 0x0b})
	src := withHelper(func(fib int) []byte { return ops(i32c(60), call(fib), opDrop, i32c(0)) }, body)
	h := abitest.New()
	s := startBare(t, compile(t, newRuntime(t), "fib.wasm", src), h, abi.Limits{CallTimeout: 100 * time.Millisecond})
	defer closeScript(t, s)
	for range 2 { // the second runs on a fresh instance
		err := returns(t, "fib(60)", func() error { return s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpDelete}) })
		if !errors.Is(err, abi.ErrTimeout) || !strings.Contains(err.Error(), "limit 100ms") {
			t.Fatalf("Handle: %v; want %v (limit 100ms)", err, abi.ErrTimeout)
		}
	}
}

// TestInterruptLoopWithParams: a loop whose block type is a type index
// with a parameter (multi-value) is instrumented and stopped.
func TestInterruptLoopWithParams(t *testing.T) {
	src := withHelper(func(typ int) []byte {
		loop := ops([]byte{0x03}, sleb(int64(typ)), i32c(1), []byte{0x6a, 0x0c, 0x00, 0x0b}) // loop (type typ): +1; br 0; end
		return ops(i32c(5), loop, opDrop, i32c(0))
	}, localGet(0))
	h := abitest.New()
	s := startBare(t, compile(t, newRuntime(t), "params.wasm", src), h, abi.Limits{CallTimeout: 100 * time.Millisecond})
	defer closeScript(t, s)
	err := returns(t, "the loop", func() error { return s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpDelete}) })
	if !errors.Is(err, abi.ErrTimeout) {
		t.Fatalf("Handle: %v; want %v", err, abi.ErrTimeout)
	}
}

// TestInterruptDoesNotHoldUpGC: a garbage collection (a stop-the-world)
// completes while a guest spins: the guest returns to Go now and then
// (instrument's $tick). A flag checked only in compiled code would hold up
// the collection, and every goroutine with it, until the guest's deadline
// (here a minute; the test then fails at stuckBound).
func TestInterruptDoesNotHoldUpGC(t *testing.T) {
	r := newRuntime(t)
	logThenSpin := ops(i32c(abi.LevelInfo), i32c(0), i32c(0), call(importIndex(abi.FnLog)), opDrop, opSpin, i32c(0))
	h := abitest.New()
	s := startBare(t, compile(t, r, "spin.wasm", handGuest(logThenSpin).bytes()), h, abi.Limits{CallTimeout: time.Hour})
	handled := goCall(func() error { return s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpDelete}) })
	testutil.WaitFor(t, "the guest to loop", func() bool { return len(h.Logs()) > 0 })
	for range 3 {
		if err := returns(t, "a GC while the guest spins", func() error { runtime.GC(); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-handled:
		t.Fatalf("the spinning guest returned: %v", err)
	default:
	}
	closeScript(t, s)
	if err := await(t, "the loop stopped by Close", handled); !errors.Is(err, ErrClosed) {
		t.Fatalf("Handle: %v; want %v", err, ErrClosed)
	}
}

// TestInstrumentRefuses: a module exporting the reserved name, modules
// with opcodes instrument does not know (exception handling, not enabled;
// a SIMD gap) and one with a section of more entries than bytes are
// refused with a compile error naming the problem.
func TestInstrumentRefuses(t *testing.T) {
	r := newRuntime(t)
	marker := i32c(0x1234567) // locates the bad opcode in the binary
	cases := []struct {
		name string
		mod  wModule
		bad  []byte // the instruction the error names (after marker)
		want string
	}{
		{"reserved export", handGuest(nil).withFunc(wFunc{export: interruptExport, body: nil}), nil,
			`exports "ssrun.interrupt", a name the host reserves for itself`},
		{"try", handGuest(ops(marker, opDrop, []byte{0x06, 0x40, 0x0b}, i32c(0))), []byte{0x06}, "unknown opcode 0x06 at offset "},
		{"SIMD gap", handGuest(ops(marker, opDrop, []byte{0xfd, 0xee, 0x01}, i32c(0))), []byte{0xfd}, "unknown opcode 0xfd 238 at offset "},
		{"0xfc 18", handGuest(ops(marker, opDrop, []byte{0xfc, 18}, i32c(0))), []byte{0xfc}, "unknown opcode 0xfc 18 at offset "},
	}
	// wazero allocates a vector by its count before reading it: given
	// this module, it would exhaust the memory and crash the process.
	huge := module([]byte{2, 0xfc, 0xff, 0xff, 0xff, 0x03, 0, 0})
	if _, err := r.Compile(context.Background(), "huge.wasm", huge); err == nil || !strings.Contains(err.Error(), "section 2 at offset 8 claims 1073741820 entries in 2 bytes") {
		t.Errorf("Compile(an import section of 2^30 entries in 2 bytes): %v", err)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			src := c.mod.bytes()
			want := c.want
			if c.bad != nil {
				at := bytes.Index(src, ops(marker, opDrop, c.bad))
				if at < 0 {
					t.Fatal("marker not found")
				}
				want += strconv.Itoa(at + len(marker) + 1)
			}
			_, err := r.Compile(context.Background(), "bad.wasm", src)
			var ce *abi.CompileError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "interrupt checks") {
				t.Fatalf("Compile: %v; want a compile error with %q", err, want)
			}
		})
	}
}

// asGuests are AssemblyScript rules in the tree (abi/guest/assemblyscript
// runs its verbs rule through this runtime in full).
var asGuests = []string{
	"../../abi/guest/assemblyscript/testdata/verbs.wasm",
	"../../abi/guest/assemblyscript/testdata/verbs-r1.wasm",
	"../../examples/thermostat-as/rules/thermostat.wasm",
}

// testModules returns the test guests: the Go ones under testdata and the
// AssemblyScript ones, by name.
func testModules(t testing.TB) map[string][]byte {
	t.Helper()
	mods := map[string][]byte{}
	for _, n := range guestNames {
		mods[n] = guest(t, n)
	}
	for _, p := range asGuests {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		mods[filepath.Base(p)] = src
	}
	return mods
}

// TestInstrumentTestModules: for every test guest, instrument's output
// compiles and imports and exports the functions the module did (the
// flag's export is checked by every instantiation, see instantiate), and
// the AssemblyScript ones load (their initialisation runs instrumented)
// and start.
func TestInstrumentTestModules(t *testing.T) {
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	for name, src := range testModules(t) {
		out, checks, err := instrumentCount(src)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		before, err := rt.CompileModule(ctx, src)
		if err != nil {
			t.Fatalf("%s: the module itself: %v", name, err)
		}
		after, err := rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("%s: instrumented: %v", name, err)
		}
		if got, want := len(after.ExportedFunctions()), len(before.ExportedFunctions()); got != want {
			t.Errorf("%s: %d exported functions; want %d", name, got, want)
		}
		if got, want := len(after.ImportedFunctions()), len(before.ImportedFunctions()); got != want {
			t.Errorf("%s: %d imported functions; want %d", name, got, want)
		}
		t.Logf("%s: %d checks, %d -> %d bytes", name, checks, len(src), len(out))
	}
	r := newRuntime(t)
	for _, p := range asGuests {
		src, _ := os.ReadFile(p)
		s := startBare(t, compile(t, r, filepath.Base(p), src), abitest.New(), abi.Limits{})
		closeScript(t, s)
	}
}

// BenchmarkInstrument: instrumenting the Go test rule (after mergeData, as
// compiledLocked does).
func BenchmarkInstrument(b *testing.B) {
	src := mergeData(guest(b, "rule"))
	b.SetBytes(int64(len(src)))
	var out []byte
	for b.Loop() {
		var err error
		if out, err = instrument(src); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(out))/float64(len(src)), "x-size")
}

// FuzzInstrument: instrument never panics, and whatever wazero compiles it
// instruments into a module wazero compiles, with one check per insertion
// point it reports. (A module with more entries in a section than bytes,
// or any other LEB128 number that may be a large count, is not given to
// wazero: its decoder allocates many vectors by their count before it
// reads them (type parameters, element and data segments, the name
// section), and may exhaust the memory and crash. That is wazero's
// problem, and ssrun's, but not this test's.)
func FuzzInstrument(f *testing.F) {
	for _, p := range asGuests {
		src, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(src)
	}
	m := handGuest(nil)
	fib := len(m.imports) + len(m.funcs)
	f.Add(withHelper(func(fib int) []byte { return ops(i32c(60), call(fib), opDrop, i32c(0)) },
		ops(localGet(0), i32c(2), []byte{0x48, 0x04, 0x7f}, localGet(0), []byte{0x05}, localGet(0), i32c(1), []byte{0x6b}, call(fib), []byte{0x0b})))
	f.Add(withHelper(func(typ int) []byte {
		return ops(i32c(5), []byte{0x03}, sleb(int64(typ)), i32c(1), []byte{0x6a, 0x0c, 0x00, 0x0b}, opDrop, i32c(0))
	}, localGet(0)))
	f.Add(handGuest(ops(opSpin, []byte{0x03, 0x7f, 0x41, 0x01, 0x0b}, opDrop, i32c(0))).bytes())
	f.Add(handGuest(ops(i32c(0), []byte{0xfd, 0x11, 0xfd, 0x15, 0x03, 0xfd, 0x0c}, bytes.Repeat([]byte{7}, 16), []byte{0x1a, 0x1a, 0xfc, 0x00, 0x1a}, i32c(0))).bytes())
	f.Add(module())
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x0a\x04\x01\x02\x00\x0b"))

	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigInterpreter())
	f.Cleanup(func() { _ = rt.Close(ctx) })
	f.Fuzz(func(t *testing.T, src []byte) {
		out, checks, err := instrumentCount(src)
		if errors.Is(err, errImplausible) || errors.Is(err, errLimit) || bigNumbers(src) {
			return // wazero may allocate by a count it has not checked yet, or take what ssrun refuses
		}
		cm, cerr := rt.CompileModule(ctx, src)
		if cerr != nil {
			return
		}
		_ = cm.Close(ctx)
		if err != nil {
			t.Fatalf("wazero compiles the module, instrument fails: %v", err)
		}
		cm, err = rt.CompileModule(ctx, out)
		if err != nil {
			t.Fatalf("the instrumented module does not compile: %v", err)
		}
		_ = cm.Close(ctx)
		if n := countChecks(t, out) - countChecks(t, src); n != checks {
			t.Fatalf("%d more checks in the code; instrument reports %d", n, checks)
		}
		if _, _, err := instrumentCount(out); err == nil || !strings.Contains(err.Error(), interruptExport) {
			t.Fatalf("instrumenting twice: %v; want the reserved name refused", err)
		}
	})
}

// countChecks counts the checks in the code section of a module: the
// sequences "global.get c; i32.const 1; i32.sub; global.set c; global.get
// c; i32.eqz; if; call t; end" for any c and t.
func countChecks(t *testing.T, mod []byte) int {
	secs, err := readSections(mod)
	if err != nil {
		t.Fatal(err)
	}
	var code []byte
	for _, s := range secs {
		if s.id == 10 {
			code = s.payload
		}
	}
	n := 0
	for i := 0; i < len(code); i++ {
		r := reader{p: code, off: i}
		ok := func(b byte) bool { v, err := r.byte(""); return err == nil && v == b }
		if !ok(0x23) {
			continue
		}
		c, err := r.u32("")
		if err != nil || !ok(0x41) || !ok(0x01) || !ok(0x6b) || !ok(0x24) {
			continue
		}
		if c2, err := r.u32(""); err != nil || c2 != c || !ok(0x23) {
			continue
		}
		if c3, err := r.u32(""); err != nil || c3 != c || !ok(0x45) || !ok(0x04) || !ok(0x40) || !ok(0x10) {
			continue
		}
		if _, err := r.u32(""); err != nil || !ok(0x0b) {
			continue
		}
		n++
	}
	return n
}

// bigNumbers reports whether src holds, at any offset, a LEB128 number of
// 4 or 5 bytes above 2^20: one that may be a count wazero allocates by.
func bigNumbers(src []byte) bool {
	for i := range src {
		if v, n := binary.Uvarint(src[i:min(i+5, len(src))]); n >= 4 && v > 1<<20 {
			return true
		}
	}
	return false
}

// withStart returns src with a start section naming function fn, placed
// before the first section that must follow it.
func withStart(t *testing.T, src []byte, fn int) []byte {
	t.Helper()
	secs, err := readSections(src)
	if err != nil {
		t.Fatal(err)
	}
	start := appendSection(nil, 8, uleb(uint64(fn)))
	for _, s := range secs {
		if rank := sectionRank(s.id); rank > sectionRank(8) {
			return ops(src[:s.start], start, src[s.start:])
		}
	}
	return ops(src, start)
}

// TestInterruptStartFunction: a module's start function (its start
// section) that never ends is stopped at the load check's deadline, as
// _initialize is: instrument moves it out of the instantiation (where no
// flag could stop it, and the load hung) into a call under the flag. One
// that ends runs once per instance, before _initialize, and may call the
// host.
func TestInterruptStartFunction(t *testing.T) {
	r := newRuntime(t)
	m := minimal()
	spin := len(m.imports) + len(m.funcs)
	m.funcs = append(m.funcs, wFunc{body: opSpin})
	err := returns(t, "Compile of a module whose start function spins", func() error {
		_, err := r.Compile(context.Background(), "start.wasm", withStart(t, m.bytes(), spin))
		return err
	})
	if err == nil || !strings.Contains(err.Error(), "exceeded its deadline") {
		t.Fatalf("Compile: %v; want the load check's deadline", err)
	}

	// A start function that ends runs once per instance, before
	// _initialize: it adds 1 to a byte of memory, which _initialize
	// doubles (1 + 1 = 2 the other way round).
	const at = 64
	g := handGuest(nil)
	incr := ops(i32c(at), i32c(at), []byte{0x2d, 0x00, 0x00}, i32c(1), []byte{0x6a, 0x3a, 0x00, 0x00})   // mem[at] += 1
	double := ops(i32c(at), i32c(at), []byte{0x2d, 0x00, 0x00}, i32c(2), []byte{0x6c, 0x3a, 0x00, 0x00}) // mem[at] *= 2
	startFn := len(g.imports) + len(g.funcs)
	g.funcs = append(g.funcs, wFunc{body: incr}, wFunc{export: exportInitialize, body: double})
	s := startBare(t, compile(t, r, "started.wasm", withStart(t, g.bytes(), startFn)), abitest.New(), abi.Limits{CallTimeout: time.Minute})
	defer closeScript(t, s)
	if b, ok := s.in.mod.Memory().ReadByte(at); !ok || b != 2 {
		t.Fatalf("memory[%d] = %d after start and _initialize, want 2 (start, then _initialize, once each)", at, b)
	}
}

// TestInstrumentRefusesAddedIndices: code naming a global or function
// past the module's own (those instrument adds: the check's counter, the
// flag, $tick) is refused, naming the index and its offset: such a module
// was invalid, and instrumented it would have been valid, its guest able
// to keep the check from ever looking at the flag.
func TestInstrumentRefusesAddedIndices(t *testing.T) {
	r := newRuntime(t)
	g := handGuest(nil)
	funcs := len(g.imports) + len(g.funcs) + 1 // handGuest's, and the one added below
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		{"global.set of the counter", ops(i32c(0), []byte{0x24, 0x01}, i32c(0)), "global 1 named at offset "},
		{"global.set of the flag", ops(i32c(0), []byte{0x24, 0x00}, i32c(0)), "global 0 named at offset "},
		{"global.get", ops([]byte{0x23, 0x01}), "global 1 named at offset "},
		{"call of $tick", ops(call(funcs), i32c(0)), fmt.Sprintf("function %d named at offset ", funcs)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := handGuest(nil)
			m.funcs = append(m.funcs, wFunc{export: "bad", results: []api.ValueType{i32}, body: tc.body})
			_, err := r.Compile(context.Background(), "bad.wasm", m.bytes())
			var ce *abi.CompileError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "the module has") {
				t.Fatalf("Compile: %v; want a compile error with %q", err, tc.want)
			}
		})
	}
}

// hugeVector is a module declaring, in a few bytes, a vector of hundreds
// of millions of entries where wazero allocates by the count before it
// reads, and the compile error that names it.
type hugeVector struct {
	name string
	mod  []byte
	want string
}

// hugeVectors: a body's locals, the name section's maps, an element
// segment.
func hugeVectors() []hugeVector {
	big := []byte{0x80, 0x80, 0x80, 0x80, 0x01}                                                           // 2^28
	sec := func(id byte, payload ...[]byte) []byte { return ops(append([]byte{id}, ops(payload...)...)) } // for module
	typ, fn := sec(1, []byte{1, 0x60, 0, 0}), sec(3, []byte{1, 0})
	return []hugeVector{
		{"locals", module(typ, fn, sec(10, []byte{1, 8, 1, 0x80, 0x80, 0x80, 0x80, 0x04, 0x7f, 0x0b})), "more than 50000 locals"},
		{"function names", module(sec(0, []byte{4, 'n', 'a', 'm', 'e', 1, 5}, big)), "function names at offset 17 claims 268435456 entries in 0 bytes"},
		{"local names", module(sec(0, []byte{4, 'n', 'a', 'm', 'e', 2, 5}, big)), "local names at offset 17 claims 268435456 entries in 0 bytes"},
		{"element segment", module(sec(9, []byte{1, 0, 0x41, 0, 0x0b}, big)), "element count at offset 15 claims 268435456 entries in 0 bytes"},
	}
}

// TestInstrumentRefusesHugeVectors: the hugeVectors are refused with a
// compile error naming the place. Each crashed the process before (wazero
// panicked, "Too large variable", or exhausted the memory).
func TestInstrumentRefusesHugeVectors(t *testing.T) {
	r := newRuntime(t)
	for _, tc := range hugeVectors() {
		t.Run(tc.name, func(t *testing.T) {
			_, err := r.Compile(context.Background(), "huge.wasm", tc.mod)
			var ce *abi.CompileError
			if !errors.As(err, &ce) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Compile: %v; want a compile error with %q", err, tc.want)
			}
		})
	}
}

// FuzzCompile: Runtime.Compile of any bytes, a hostile rule file, returns
// a program or an error and never crashes the process (a panic, or a
// memory exhaustion in wazero from a count it trusted, fails the run).
// Seeds: small hand-made modules, valid and not, and the hugeVectors.
func FuzzCompile(f *testing.F) {
	f.Add(handGuest(nil).bytes())
	f.Add(minimal().withFunc(wFunc{export: exportInitialize, body: opSpin}).bytes())
	for _, h := range hugeVectors() {
		f.Add(h.mod)
	}
	r := newRuntime(f)
	f.Fuzz(func(t *testing.T, src []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = r.Compile(ctx, "fuzz.wasm", src) // a program or an error, as long as it returns
	})
}
