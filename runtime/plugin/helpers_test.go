package plugin

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// testDir holds the plugins built for this test binary.
var testDir = gobuild.Dir{Prefix: "ssrun-plugin-test-"}

// rulePlugin returns the path of the test plugin testdata/rule, built once
// per test binary run.
func rulePlugin(t testing.TB) string {
	t.Helper()
	path, err := testDir.Exe("rule", "./testdata/rule")
	if err != nil {
		t.Fatalf("build test plugin: %v", err)
	}
	return path
}

// newRuntime returns a Runtime logging into the returned buffer, closed
// when the test ends.
func newRuntime(t testing.TB, opts Config) (*Runtime, *testutil.Buffer) {
	t.Helper()
	logs := &testutil.Buffer{}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	r, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	r.grpcSession, r.unaryOnly = grpcSessions, unaryOnly
	testutil.CloseAtEnd(t, "runtime", r.Close)
	return r, logs
}

// grpcSessions makes newRuntime's runtimes offer no raw session channel,
// so that sessions stay on their gRPC stream (see forTransports).
var grpcSessions bool

// forTransports runs test twice, as subtests: "raw", its runtimes carrying
// sessions on the raw channel, and "grpc", on the Session stream.
func forTransports(t *testing.T, test func(t *testing.T)) {
	t.Helper()
	for _, grpc := range []bool{false, true} {
		t.Run(map[bool]string{false: "raw", true: "grpc"}[grpc], func(t *testing.T) {
			grpcSessions = grpc
			t.Cleanup(func() { grpcSessions = false })
			test(t)
		})
	}
}

// unaryOnly makes newRuntime's runtimes open no session: one Handle call
// per event (see forAllTransports).
var unaryOnly bool

// forAllTransports runs test as forTransports does, and a third time as
// "unary", its runtimes opening no session (one Handle RPC per event and
// one RPC per host call, as for a plugin built before sessions).
func forAllTransports(t *testing.T, test func(t *testing.T)) {
	t.Helper()
	forTransports(t, test)
	t.Run("unary", func(t *testing.T) {
		unaryOnly = true
		t.Cleanup(func() { unaryOnly = false })
		test(t)
	})
}

// slogTo returns a debug-level logger writing into w.
func slogTo(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func compile(t testing.TB, r *Runtime, path string) abi.Program {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := r.Compile(context.Background(), path, src)
	if err != nil {
		t.Fatalf("Compile(%s): %v", path, err)
	}
	return p
}

func start(t testing.TB, p abi.Program, h abi.Host, lim abi.Limits) *script {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := p.Start(ctx, h, lim)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s.(*script)
}

// ruleScript starts the test plugin on a runtime of its own.
func ruleScript(t testing.TB, h abi.Host, lim abi.Limits) (*script, *Runtime, *testutil.Buffer) {
	t.Helper()
	r, logs := newRuntime(t, Config{})
	return start(t, compile(t, r, rulePlugin(t)), h, lim), r, logs
}

// The test plugin's protocol helpers (internal/ruletest), under the names
// this package's tests use.
var (
	command = ruletest.Command
	run     = ruletest.Run
)

// wantError checks that err is an *Error of call unwrapping to sentinel.
func wantError(t testing.TB, err error, call string, sentinel error) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T), want *plugin.Error", err, err)
	}
	if e.Call != call || !errors.Is(err, sentinel) {
		t.Fatalf("error %q: call %q, wraps %v? %t; want call %q wrapping %v", err, e.Call, sentinel, errors.Is(err, sentinel), call, sentinel)
	}
	return e
}
