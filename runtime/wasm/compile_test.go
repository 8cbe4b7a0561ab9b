package wasm

import (
	"context"
	"errors"
	"hash/maphash"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// minimal is a valid rule without host imports, plus extra imports.
func minimal(imports ...wImport) wModule {
	return wModule{imports: imports, memPages: 1, memExport: "memory", funcs: []wFunc{
		{export: abi.ExportABIVersion, results: []api.ValueType{i32}, body: i32c(abi.Version)},
		{export: abi.ExportAlloc, params: []api.ValueType{i32}, results: []api.ValueType{i32}, body: i32c(handAllocAt)},
		{export: abi.ExportOnEvent, params: []api.ValueType{i32, i32}, results: []api.ValueType{i32}, body: i32c(0)},
	}}
}

func sig(params ...api.ValueType) []api.ValueType { return params }

var (
	opI32Ne = []byte{0x47}
	opIf    = []byte{0x04, 0x40}
	opEnd   = []byte{0x0b}
)

// TestCompileChecks: every load check rejects with an *abi.CompileError that
// names the import or export at fault; valid modules load.
func TestCompileChecks(t *testing.T) {
	r := sharedRuntime(t)
	hand := handGuest(nil)
	// An _initialize that checks the load-check host: watch succeeds, get
	// is UNAVAILABLE; anything else traps.
	checkProbe := ops(
		i32c(0), i32c(1), i32c(0), call(importIndex(abi.FnWatch)), i32c(0), opI32Ne, opIf, opUnreachable, opEnd,
		i32c(0), i32c(1), i32c(0x100), i32c(16), i32c(0x200), call(importIndex(abi.FnGet)),
		i32c(int32(abi.StatusUnavailable)), opI32Ne, opIf, opUnreachable, opEnd,
	)
	// An _initialize arming a timer (payload "k") and reading the clock: the
	// load check accepts both; anything else traps.
	timerProbe := ops(
		i32c(0), i32c(1), i64c(1000), i64c(0), i32c(0), i32c(1), call(importIndex(abi.FnTimer)), i32c(0), opI32Ne, opIf, opUnreachable, opEnd,
		i32c(0x100), call(importIndex(abi.FnNow)), i32c(0), opI32Ne, opIf, opUnreachable, opEnd,
	)
	unit := []api.ValueType(nil)
	cases := []struct {
		name string
		bin  []byte
		want string // the whole error text, or a prefix ending in "..."
	}{
		{"valid minimal", minimal().bytes(), ""},
		{"valid with every host import", hand.bytes(), ""},
		{"valid reactor init using watch and get", hand.withFunc(wFunc{export: exportInitialize, body: checkProbe}).bytes(), ""},
		{"valid reactor init arming a timer", hand.withFunc(wFunc{export: exportInitialize, body: timerProbe}).bytes(), ""},
		{"valid with WASI imports", minimal(wImport{"wasi_snapshot_preview1", "fd_write", sig(i32, i32, i32, i32), sig(i32)}).bytes(), ""},

		{"garbage", []byte("\x00asm but not really"), "rule.wasm: invalid module: ..."},
		{"unknown ssrun import", minimal(wImport{"ssrun", "get_v2", sig(i32, i32), sig(i32)}).bytes(),
			"rule.wasm: import ssrun.get_v2 is not part of ssrun ABI v1"},
		{"ssrun import with wrong params", minimal(wImport{"ssrun", "get", sig(i32), sig(i32)}).bytes(),
			"rule.wasm: import ssrun.get has signature (i32) -> (i32); ssrun ABI v1 has (i32, i32, i32, i32, i32) -> (i32)"},
		{"ssrun import with i32 for i64", minimal(wImport{"ssrun", "lock", sig(i32, i32, i32, i64, i32, i32, i32), sig(i32)}).bytes(),
			"rule.wasm: import ssrun.lock has signature (i32, i32, i32, i64, i32, i32, i32) -> (i32); ssrun ABI v1 has (i32, i32, i64, i64, i32, i32, i32) -> (i32)"},
		{"timer import with i32 durations", minimal(wImport{"ssrun", "timer", sig(i32, i32, i32, i32, i32, i32), sig(i32)}).bytes(),
			"rule.wasm: import ssrun.timer has signature (i32, i32, i32, i32, i32, i32) -> (i32); ssrun ABI v1 has (i32, i32, i64, i64, i32, i32) -> (i32)"},
		{"now import returning i64", minimal(wImport{"ssrun", "now", unit, sig(i64)}).bytes(),
			"rule.wasm: import ssrun.now has signature () -> (i64); ssrun ABI v1 has (i32) -> (i32)"},
		{"ssrun import without result", minimal(wImport{"ssrun", "unwatch", sig(i32, i32), unit}).bytes(),
			"rule.wasm: import ssrun.unwatch has signature (i32, i32) -> (); ssrun ABI v1 has (i32, i32) -> (i32)"},
		{"foreign import", minimal(wImport{"env", "now", unit, sig(i64)}).bytes(),
			`rule.wasm: import env.now: a rule may import only from "ssrun" and "wasi_snapshot_preview1"`},
		{"unknown WASI import", minimal(wImport{"wasi_snapshot_preview1", "sock_magic", unit, sig(i32)}).bytes(),
			"rule.wasm: import wasi_snapshot_preview1.sock_magic is not a WASI preview 1 function"},
		{"WASI import with wrong signature", minimal(wImport{"wasi_snapshot_preview1", "fd_write", sig(i32), sig(i32)}).bytes(),
			"rule.wasm: import wasi_snapshot_preview1.fd_write has signature (i32) -> (i32); WASI preview 1 has (i32, i32, i32, i32) -> (i32)"},
		{"imported memory", func() []byte { m := minimal(); m.memImport, m.memExport = true, ""; return m.bytes() }(),
			"rule.wasm: imports its memory (env.memory); a rule must define and export it as \"memory\""},
		{"memory not exported", func() []byte { m := minimal(); m.memExport = ""; return m.bytes() }(),
			`rule.wasm: does not export its memory as "memory"`},
		{"memory exported as mem", func() []byte { m := minimal(); m.memExport = "mem"; return m.bytes() }(),
			`rule.wasm: does not export its memory as "memory"`},
		{"missing ssrun_alloc", minimal().without(abi.ExportAlloc).bytes(),
			"rule.wasm: missing export ssrun_alloc (i32) -> (i32) (the ssrun guest SDK provides it)"},
		{"missing every export", minimal().without(abi.ExportAlloc).without(abi.ExportABIVersion).without(abi.ExportOnEvent).bytes(),
			"rule.wasm: missing export ssrun_abi_version () -> (i32) (the ssrun guest SDK provides it); " +
				"missing export ssrun_alloc (i32) -> (i32) (the ssrun guest SDK provides it); " +
				"missing export ssrun_on_event (i32, i32) -> (i32) (the ssrun guest SDK provides it)"},
		{"ssrun_on_event with wrong signature", minimal().withFunc(wFunc{export: abi.ExportOnEvent, params: sig(i32), results: sig(i32), body: i32c(0)}).bytes(),
			"rule.wasm: export ssrun_on_event has signature (i32) -> (i32); ABI v1 wants (i32, i32) -> (i32)"},
		{"ssrun_abi_version without result", minimal().withFunc(wFunc{export: abi.ExportABIVersion}).bytes(),
			"rule.wasm: export ssrun_abi_version has signature () -> (); ABI v1 wants () -> (i32)"},
		{"WASI command", minimal().withFunc(wFunc{export: "_start"}).bytes(),
			"rule.wasm: is a WASI command (exports _start); build a reactor, e.g. GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared"},
		{"_initialize with a parameter", minimal().withFunc(wFunc{export: exportInitialize, params: sig(i32)}).bytes(),
			"rule.wasm: export _initialize has signature (i32) -> (); want () -> ()"},
		{"ABI version 2", minimal().withFunc(wFunc{export: abi.ExportABIVersion, results: sig(i32), body: i32c(2)}).bytes(),
			"rule.wasm: built for ssrun ABI v2; this host speaks v1"},
		{"ABI version 0", minimal().withFunc(wFunc{export: abi.ExportABIVersion, results: sig(i32), body: i32c(0)}).bytes(),
			"rule.wasm: built for ssrun ABI v0; this host speaks v1"},
		{"ssrun_abi_version traps", minimal().withFunc(wFunc{export: abi.ExportABIVersion, results: sig(i32), body: ops(opUnreachable, i32c(1))}).bytes(),
			"rule.wasm: ssrun_abi_version failed: handler failed: wasm error: unreachable"},
		{"initialisation traps", minimal().withFunc(wFunc{export: exportInitialize, body: opUnreachable}).bytes(),
			"rule.wasm: initialisation failed during the load check (where store verbs other than watch, unwatch, watch_pattern, unwatch_pattern, log, timer, cancel and now fail with UNAVAILABLE): handler failed: wasm error: unreachable"},
		{"initialisation exits", func() []byte {
			m := minimal(wImport{"wasi_snapshot_preview1", "proc_exit", sig(i32), unit})
			return m.withFunc(wFunc{export: exportInitialize, body: ops(i32c(7), call(0))}).bytes()
		}(), "rule.wasm: initialisation failed during the load check (where store verbs other than watch, unwatch, watch_pattern, unwatch_pattern, log, timer, cancel and now fail with UNAVAILABLE): handler failed: the rule exited with code 7"},
		{"initialisation never ends", minimal().withFunc(wFunc{export: exportInitialize, body: opSpin}).bytes(),
			"rule.wasm: initialisation failed during the load check (where store verbs other than watch, unwatch, watch_pattern, unwatch_pattern, log, timer, cancel and now fail with UNAVAILABLE): handler exceeded its deadline (limit 1s)"},
		{"memory minimum above the default limit", func() []byte { m := minimal(); m.memPages = 1025; return m.bytes() }(),
			"rule.wasm: invalid module: ..."},
		{"wrong ABI version (Go)", guest(t, "wrongversion"), "rule.wasm: built for ssrun ABI v2; this host speaks v1"},
		{"unknown ssrun import (Go)", guest(t, "unknownimport"), "rule.wasm: import ssrun.get_v2 is not part of ssrun ABI v1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p, err := r.Compile(context.Background(), "rule.wasm", tc.bin)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Compile: %v", err)
				}
				if p == nil {
					t.Fatal("Compile returned no program")
				}
				return
			}
			var ce *abi.CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("Compile error %v (%T), want *abi.CompileError", err, err)
			}
			if ce.File != "rule.wasm" || ce.Line != 0 {
				t.Errorf("CompileError file %q line %d, want rule.wasm line 0", ce.File, ce.Line)
			}
			if prefix, ok := strings.CutSuffix(tc.want, "..."); ok {
				if !strings.HasPrefix(err.Error(), prefix) {
					t.Fatalf("error\n got %s\nwant %s", err, tc.want)
				}
			} else if err.Error() != tc.want {
				t.Fatalf("error\n got %s\nwant %s", err, tc.want)
			}
		})
	}
}

// TestCompileCachesVerdict: the same bytes are compiled and checked once,
// also when compiled concurrently; a bad module keeps failing the same way.
func TestCompileCachesVerdict(t *testing.T) {
	r := newRuntime(t)
	good := handGuest(nil).bytes()
	bad := minimal(wImport{"ssrun", "nope", nil, sig(i32)}).bytes()
	// While a Program of a module is alive, compiling the same bytes again,
	// from many goroutines at once, reuses its code and its verdict. (The
	// Programs are kept: compiled code is released once none uses it.)
	first := compile(t, r, "x.wasm", good)
	var wg sync.WaitGroup
	progs := make([]abi.Program, 8)
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() {
			src := good
			if i%2 == 1 {
				src = bad
			}
			progs[i], errs[i] = r.Compile(context.Background(), "x.wasm", src)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("good module: %v", err)
		}
		if i%2 == 1 && (err == nil || err.Error() != "x.wasm: import ssrun.nope is not part of ssrun ABI v1") {
			t.Errorf("bad module: %v", err)
		}
	}
	// One compilation of the good module; the bad one compiles at least once
	// (its verdict is dropped with its last user, and the goroutines need not
	// overlap).
	if n := r.compiles.Load(); n < 2 || n > 1+4 {
		t.Errorf("%d compilations: want 1 for the good module and 1 to 4 for the bad one", n)
	}
	goodCompiles := r.compiles.Load()
	if _, err := r.Compile(context.Background(), "y.wasm", good); err != nil {
		t.Fatal(err)
	}
	if n := r.compiles.Load(); n != goodCompiles {
		t.Errorf("compiling a module in use again compiled it (%d -> %d)", goodCompiles, n)
	}
	runtime.KeepAlive(first)
	runtime.KeepAlive(progs)
}

// TestCompileCacheOnDisk: compiled code lands in CacheDir, and a second
// Runtime over the same directory reads it instead of compiling again (a
// recompilation would replace the file: wazero writes a temp file and
// renames it over the old one).
func TestCompileCacheOnDisk(t *testing.T) {
	dir := t.TempDir()
	src := handGuest(nil).bytes()
	compileIn := func() {
		r, err := New(Config{CacheDir: dir, Logger: quietLogger()})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close(context.Background())
		compile(t, r, "rule.wasm", src)
	}
	files := func() map[string]os.FileInfo {
		m := map[string]os.FileInfo{}
		paths, _ := filepath.Glob(filepath.Join(dir, "wazero-*", "*"))
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			m[p] = fi
		}
		return m
	}
	compileIn()
	before := files()
	if len(before) == 0 {
		t.Fatalf("no compiled code in %s after Compile", dir)
	}
	sub, _ := filepath.Glob(filepath.Join(dir, "wazero-*"))
	if len(sub) != 1 || !strings.HasSuffix(sub[0], "-"+runtime.GOARCH+"-"+runtime.GOOS) {
		t.Errorf("cache subdirectories %v, want one per wazero version, arch and OS", sub)
	}
	compileIn()
	after := files()
	if len(after) != len(before) {
		t.Fatalf("cache files: %d before, %d after the second Runtime", len(before), len(after))
	}
	for p, fi := range before {
		if !os.SameFile(fi, after[p]) {
			t.Errorf("%s was rewritten: the second Runtime compiled again instead of using the cache", p)
		}
	}
}

// TestStartDoesNotCompile: Start instantiates the compiled module; only a
// new memory limit compiles (once) for its wazero Runtime.
func TestStartDoesNotCompile(t *testing.T) {
	r := newRuntime(t)
	p := compile(t, r, "hand.wasm", handGuest(nil).bytes())
	if n := r.compiles.Load(); n != 1 {
		t.Fatalf("%d compilations after Compile", n)
	}
	for range 2 {
		start(t, p, abitest.New(), abi.Limits{})
	}
	if n := r.compiles.Load(); n != 1 {
		t.Fatalf("%d compilations after two Starts with default limits", n)
	}
	for range 2 {
		start(t, p, abitest.New(), abi.Limits{MemoryBytes: 2 * pageSize})
	}
	if n := r.compiles.Load(); n != 2 {
		t.Fatalf("%d compilations after Starts with a second memory limit, want 2", n)
	}
	if n := len(r.engines); n != 2 {
		t.Fatalf("%d wazero runtimes, want one per memory limit (2)", n)
	}
}

// TestProgramRelease: compiled code is released once no Program (and so no
// Script) uses it, at once when none is kept (Config.Keep < 0).
func TestProgramRelease(t *testing.T) {
	r, err := New(Config{CacheDir: cacheDir(t), Logger: quietLogger(), Keep: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	src := handGuest(nil).bytes()
	p := compile(t, r, "a.wasm", src)
	s, err := p.Start(context.Background(), abitest.New(), abi.Limits{}) // not start(): its Cleanup would keep s
	if err != nil {
		t.Fatal(err)
	}
	p2 := compile(t, r, "b.wasm", src) // same content: shared
	p, p2 = nil, nil
	_, _ = p, p2
	runtime.GC()
	codes := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.codes)
	}
	if codes() != 1 {
		t.Fatal("code released while a Script uses it")
	}
	if err := s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpDelete}); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	_ = s.Close(context.Background())
	s = nil
	testutil.WaitFor(t, "compiled code to be released", func() bool {
		runtime.GC()
		return codes() == 0
	})
}

// TestClosed: a closed Script or Runtime says so.
func TestClosed(t *testing.T) {
	r, err := New(Config{CacheDir: cacheDir(t), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	p := compile(t, r, "a.wasm", handGuest(nil).bytes())
	s, err := p.Start(context.Background(), abitest.New(), abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpDelete}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Handle after Close: %v", err)
	}
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Compile(context.Background(), "a.wasm", handGuest(nil).bytes()); !errors.Is(err, ErrClosed) {
		t.Fatalf("Compile after Close: %v", err)
	}
	if _, err := p.Start(context.Background(), abitest.New(), abi.Limits{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
}

// TestNewDefaults: the zero Config work, and an unusable CacheDir fails
// clearly.
func TestNewDefaults(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	r, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	compile(t, r, "a.wasm", minimal().bytes())
	if m, _ := filepath.Glob(filepath.Join(os.Getenv("XDG_CACHE_HOME"), "ssrun", "wasm", "wazero-*")); len(m) != 1 {
		t.Errorf("default cache dir not used: %v", m)
	}

	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{CacheDir: file}); err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("New with a file as CacheDir: %v", err)
	}
}

// TestReleasedCodeIsKept: a module binary no Program uses any more stays
// compiled and checked, up to Config.Keep of them (the most recently
// released), so that loading it again (a rollback, a file saved back)
// neither compiles nor checks it; one pushed out compiles again.
func TestReleasedCodeIsKept(t *testing.T) {
	r, err := New(Config{CacheDir: cacheDir(t), Logger: quietLogger(), Keep: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(context.Background())
	a, b := handGuest(nil).bytes(), handGuest(i32c(1)).bytes()
	inUse := func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, c := range r.codes {
			if c.refs > 0 {
				return true
			}
		}
		return false
	}
	release := func() {
		t.Helper()
		testutil.WaitFor(t, "the programs to be released", func() bool { runtime.GC(); return !inUse() })
	}
	compile(t, r, "a.wasm", a)
	release() // a kept
	compile(t, r, "b.wasm", b)
	release() // b kept, a pushed out
	n := r.compiles.Load()
	compile(t, r, "b.wasm", b)
	if got := r.compiles.Load(); got != n {
		t.Fatalf("loading a released module again compiled it (%d -> %d compilations)", n, got)
	}
	compile(t, r, "a.wasm", a)
	if got := r.compiles.Load(); got != n+1 {
		t.Fatalf("a module pushed out of the kept ones: %d -> %d compilations, want one", n, got)
	}
}

// TestCompileHashCollision: code is found by a fast hash and its bytes
// compared, so other bytes under the same hash get code of their own, with
// their own verdict.
func TestCompileHashCollision(t *testing.T) {
	r := newRuntime(t)
	good := handGuest(nil).bytes()
	bad := minimal(wImport{"ssrun", "nope", nil, sig(i32)}).bytes()
	p := compile(t, r, "good.wasm", good)
	// Make good's code the one found for bad's hash.
	r.mu.Lock()
	for _, c := range r.codes {
		r.codes[maphash.Bytes(r.seed, bad)] = c
	}
	r.mu.Unlock()
	if _, err := r.Compile(context.Background(), "bad.wasm", bad); err == nil || !strings.Contains(err.Error(), "ssrun.nope") {
		t.Fatalf("bad module under the hash of a good one: %v, want its own verdict", err)
	}
	runtime.KeepAlive(p)
}
