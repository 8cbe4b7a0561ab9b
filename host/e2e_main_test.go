package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// The end-to-end tests (e2e_*_test.go) run real Lua rules and real Go
// WebAssembly rules through the host on the embedded broker. The rules are
// in testdata/e2e: one Lua file per role, and one Go guest that plays every
// role, chosen by its file name.

// e2eDir holds the guests built for this test binary and the WebAssembly
// compilation cache; TestMain removes it.
var e2eDir = gobuild.Dir{Prefix: "ssrun-host-test-"}

// guests are the two builds of testdata/e2e/guest (tags v1 and v2) and the
// one WebAssembly runtime every test shares. Under -race wazero's compiler is
// slow (seconds per Go guest), so each build is compiled once, up front, and
// its programs are kept alive so that the runtime's in-memory cache keeps
// the compiled code (the on-disk cache catches anything else).
var guests struct {
	once  sync.Once
	rt    *wasm.Runtime
	bin   map[string][]byte // by tag
	progs []abi.Program
	took  string // how long building and compiling took, for the log
	err   error
}

// closeGuests closes the guests' runtime, if a test made it.
func closeGuests() error {
	if guests.rt == nil {
		return nil
	}
	return guests.rt.Close(context.Background())
}

var guestTags = []string{"v1", "v2"}

func prepareGuests() {
	start := time.Now()
	guests.bin = map[string][]byte{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	for _, tag := range guestTags {
		wg.Go(func() {
			out, err := e2eDir.WASM("guest-"+tag+".wasm", "./testdata/e2e/guest", "-X=main.tag="+tag)
			var bin []byte
			if err == nil {
				bin, err = os.ReadFile(out)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("build guest %s: %w", tag, err))
				return
			}
			guests.bin[tag] = bin
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		guests.err = errs[0]
		return
	}
	built := time.Since(start)
	dir, err := e2eDir.Path()
	if err != nil {
		guests.err = err
		return
	}
	guests.rt, guests.err = wasm.New(wasm.Config{CacheDir: filepath.Join(dir, "cache"), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if guests.err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	progs := make([]abi.Program, len(guestTags))
	for i, tag := range guestTags {
		wg.Go(func() {
			// Any role's name will do: the load check runs once per content.
			p, err := guests.rt.Compile(ctx, "healthy.wasm", guests.bin[tag])
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("compile guest %s: %w", tag, err))
			}
			progs[i] = p
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		guests.err = errs[0]
		return
	}
	guests.progs = progs
	guests.took = fmt.Sprintf("guests built in %v, compiled in %v", built.Round(time.Millisecond), (time.Since(start) - built).Round(time.Millisecond))
}

// guest returns the guest build with tag, building and compiling both on
// first use.
func guest(t testing.TB, tag string) []byte {
	t.Helper()
	first := false
	guests.once.Do(func() { first = true; prepareGuests() })
	if guests.err != nil {
		t.Fatal(guests.err)
	}
	if first {
		t.Log(guests.took)
	}
	return guests.bin[tag]
}

// sandbox is a runtime the end-to-end scenarios run on.
type sandbox struct {
	kind string // "lua" or "wasm": the runtime and the file extension
}

var sandboxes = []sandbox{{kind: "lua"}, {kind: "wasm"}}

// file is the rule file name of name ("react", "lock-b") on this sandbox.
func (s sandbox) file(name string) string { return name + "." + s.kind }

// source returns the rule named name, version tag ("v1" or "v2"). A name
// "<role>-<id>" is the rule of role, as instance id: the Lua file gets
// `local ME = "<id>"`, the guest reads id from its file name.
func (s sandbox) source(t testing.TB, name, tag string) []byte {
	t.Helper()
	if s.kind == "wasm" {
		return guest(t, tag)
	}
	role, id, _ := strings.Cut(name, "-")
	src, err := os.ReadFile(filepath.Join("testdata", "e2e", role+".lua"))
	if err != nil {
		t.Fatal(err)
	}
	if id != "" {
		src = variant(t, src, `local ME = "a"`, fmt.Sprintf("local ME = %q", id))
	}
	if tag != "v1" {
		src = variant(t, src, `local TAG = "v1"`, fmt.Sprintf("local TAG = %q", tag))
	}
	return src
}

// variant replaces the one occurrence of old in src.
func variant(t testing.TB, src []byte, old, new string) []byte {
	t.Helper()
	if n := strings.Count(string(src), old); n != 1 {
		t.Fatalf("rule source has %d occurrences of %q, want 1", n, old)
	}
	return []byte(strings.Replace(string(src), old, new, 1))
}

// newE2E is a host with the runtime of sb (the Lua runtime, or the shared
// WebAssembly runtime) on a fresh embedded broker.
func newE2E(t *testing.T, sb sandbox, opts ...func(*Config)) *env {
	t.Helper()
	return newEnv(t, append([]func(*Config){sb.runtimes(t)}, opts...)...)
}

// newE2EAt is newE2E on the broker (or proxy) at addr.
func newE2EAt(t *testing.T, addr string, sb sandbox, opts ...func(*Config)) *env {
	t.Helper()
	return newEnvAt(t, addr, append([]func(*Config){sb.runtimes(t)}, opts...)...)
}

func (s sandbox) runtimes(t *testing.T) func(*Config) {
	t.Helper()
	var rt abi.Runtime
	if s.kind == "wasm" {
		guest(t, "v1") // builds and compiles the guests on first use
		rt = guests.rt
	} else {
		lr := lua.New(lua.Config{})
		t.Cleanup(func() { _ = lr.Close(context.Background()) }) // after the host's Close
		rt = lr
	}
	return func(o *Config) { o.Runtimes = []abi.Runtime{rt} }
}

// loadRule writes src as the rule file name in e's folder and loads it.
func (e *env) loadRule(name string, src []byte) string {
	e.t.Helper()
	p := e.writeRule(name, src)
	if err := e.host.Load(e.longCtx(), p); err != nil {
		e.t.Fatalf("load %s: %v", name, err)
	}
	return p
}

// writeRule writes the rule file name (replacing it in one rename, as
// editors do) and returns its path.
func (e *env) writeRule(name string, src []byte) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name)
	tmp := filepath.Join(e.dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, src, 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// longCtx bounds a load, which may compile a module.
func (e *env) longCtx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// ruleStatus is the status of the rule loaded from the file name.
func (e *env) ruleStatus(name string) RuleStatus {
	e.t.Helper()
	s, ok := ruleStatus(e.host, name)
	if !ok {
		e.t.Fatalf("rule %s not loaded", name)
	}
	return s
}

// lookup reads key with the user client (safe from any goroutine).
func (e *env) lookup(ctx context.Context, key string) (string, bool, error) {
	res, err := e.user.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return "", false, fmt.Errorf("get %s: %w", key, err)
	}
	return string(res.Value), res.Found, nil
}

// logLines returns the host's log lines that contain every one of parts.
func (e *env) logLines(parts ...string) []string {
	var out []string
	for _, l := range strings.Split(e.logs.String(), "\n") {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// unknownImportModule is a minimal WebAssembly module that has the memory
// and the exports ABI v1 requires but imports ssrun.get_v2, a host function
// v1 does not have (as a rule built against a newer SDK would).
func unknownImportModule() []byte {
	vec := func(items ...[]byte) []byte {
		out := []byte{byte(len(items))}
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	name := func(s string) []byte { return append([]byte{byte(len(s))}, s...) }
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	section := func(id byte, body []byte) []byte { return cat([]byte{id, byte(len(body))}, body) }
	body := func(code ...byte) []byte { return cat([]byte{byte(len(code) + 1), 0x00}, code) } // no locals
	const i32, fn, end = 0x7f, 0x60, 0x0b
	return cat(
		[]byte("\x00asm\x01\x00\x00\x00"),
		section(1, vec( // types
			[]byte{fn, 2, i32, i32, 1, i32}, // 0: (i32, i32) -> i32
			[]byte{fn, 0, 1, i32},           // 1: () -> i32
			[]byte{fn, 1, i32, 1, i32},      // 2: (i32) -> i32
		)),
		section(2, vec(cat(name("ssrun"), name("get_v2"), []byte{0x00, 0}))), // func 0, type 0
		section(3, vec([]byte{1}, []byte{2}, []byte{0})),                     // funcs 1, 2, 3
		section(5, vec([]byte{0x00, 1})),                                     // memory, min 1 page
		section(7, vec(
			cat(name("memory"), []byte{0x02, 0}),
			cat(name(abi.ExportABIVersion), []byte{0x00, 1}),
			cat(name(abi.ExportAlloc), []byte{0x00, 2}),
			cat(name(abi.ExportOnEvent), []byte{0x00, 3}),
		)),
		section(10, vec(
			body(0x41, 1, end),                   // i32.const 1
			body(0x41, 0, end),                   // i32.const 0
			body(0x20, 0, 0x20, 1, 0x10, 0, end), // get_v2(ptr, len)
		)),
	)
}
