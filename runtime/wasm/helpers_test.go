package wasm

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// testDir holds the guests built for this test binary and the shared
// compilation cache.
var testDir = gobuild.Dir{Prefix: "ssrun-wasm-test-"}

// guestNames are the Go test guests under testdata.
var guestNames = []string{"rule", "sleeper", "wrongversion", "unknownimport"}

var prebuild sync.Once

// guest returns the wasm binary of testdata/<name>, building every guest
// (in parallel) on first use.
func guest(t testing.TB, name string) []byte {
	t.Helper()
	prebuild.Do(func() {
		var wg sync.WaitGroup
		for _, n := range guestNames {
			// gobuild.WASM is the documented way to build a Go rule. An
			// error is remembered, and answered below.
			wg.Go(func() { _, _ = testDir.WASM(n+".wasm", "./testdata/"+n) })
		}
		wg.Wait()
	})
	out, err := testDir.WASM(name+".wasm", "./testdata/"+name)
	if err != nil {
		t.Fatalf("build guest %s: %v", name, err)
	}
	bin, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// shared is one Runtime for most tests, so each guest compiles once.
var shared struct {
	once sync.Once
	r    *Runtime
	err  error
}

// closeShared closes the shared runtime, if a test made it.
func closeShared() error {
	if shared.r == nil {
		return nil
	}
	return shared.r.Close(context.Background())
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// cacheDir is the compilation cache directory the tests' runtimes share.
func cacheDir(t testing.TB) string {
	t.Helper()
	dir, err := testDir.Path()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "cache")
}

func sharedRuntime(t testing.TB) *Runtime {
	t.Helper()
	cache := cacheDir(t)
	shared.once.Do(func() {
		shared.r, shared.err = New(Config{CacheDir: cache, Logger: quietLogger()})
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	return shared.r
}

// newRuntime returns a Runtime of its own over the shared cache directory.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	r, err := New(Config{CacheDir: cacheDir(t), Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	return r
}

func compile(t testing.TB, r *Runtime, name string, src []byte) abi.Program {
	t.Helper()
	p, err := r.Compile(context.Background(), name, src)
	if err != nil {
		t.Fatalf("Compile(%s): %v", name, err)
	}
	return p
}

func start(t testing.TB, p abi.Program, h abi.Host, lim abi.Limits) *script {
	t.Helper()
	s, err := p.Start(context.Background(), h, lim)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s.(*script)
}

// ruleScript starts the Go "rule" guest on the shared runtime.
func ruleScript(t testing.TB, h abi.Host, lim abi.Limits) *script {
	t.Helper()
	return start(t, compile(t, sharedRuntime(t), "rule.wasm", guest(t, "rule")), h, lim)
}

// The rule guest's protocol helpers (internal/ruletest), under the names
// this package's tests use.
var (
	command   = ruletest.Command
	reports   = ruletest.Reports
	run       = ruletest.Run
	notCalled = ruletest.NotCalled
)
