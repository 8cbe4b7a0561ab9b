// Package examplehost starts what the examples' end-to-end tests run on:
// clients connected to the embedded broker, and a host with the runtimes
// under test. Everything is closed when the test ends.
package examplehost

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// Client returns a client of the broker at addr with client id, connected
// (within protocoltest.ConnectBound) and closed when the test ends. Its log
// is discarded unless opts, which change its configuration, give a Logger.
func Client(t testing.TB, addr, id string, opts ...func(*protocol.Config)) *protocol.Client {
	t.Helper()
	cfg := protocol.Config{Servers: []string{addr}, ClientID: id}
	for _, o := range opts {
		o(&cfg)
	}
	return protocoltest.Connect(t, cfg)
}

// Host returns a host with opts, closed when the test ends: a Close that
// fails fails the test (testutil.CloseAtEnd). Without a Logger it logs to t.Log;
// without Defaults.Timeout a handler gets 30 s.
// Runtimes closed in a cleanup registered before Host are closed after the
// host.
func Host(t testing.TB, opts host.Config) *host.Host {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(testutil.LogWriter(t), nil))
	}
	if opts.Defaults.Timeout == 0 {
		// The tests check what a rule does, not how fast: a handler may
		// take over the 1 s default on a loaded machine (a thermostat's
		// first event did, in a CI run with -race beside other work).
		opts.Defaults.Timeout = 30 * time.Second
	}
	h, err := host.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "host", h.Close)
	return h
}

// WASMRuntime returns a WebAssembly runtime with a compilation cache of its
// own, closed when the test ends: after the hosts made after it, whose
// cleanups run first.
func WASMRuntime(t testing.TB) *wasm.Runtime {
	t.Helper()
	rt, err := wasm.New(wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	return rt
}

// GoWASMRules builds the Go rule in the test's folder (the example's
// package) as WebAssembly, as the examples' READMEs say, into a new rules
// folder as file, and returns that folder.
func GoWASMRules(t testing.TB, file string) string {
	t.Helper()
	rules := t.TempDir()
	if err := gobuild.WASM(filepath.Join(rules, file), "."); err != nil {
		t.Fatal(err)
	}
	return rules
}

// Start runs the rule files of dir in a host with runtimes on a fresh
// embedded broker, loaded within ctx, and returns the host and a client
// acting as the user. The clients' ids are name-host and name-user.
func Start(ctx context.Context, t testing.TB, name, dir string, runtimes ...abi.Runtime) (*host.Host, *protocol.Client) {
	t.Helper()
	b := brokertest.Start(t)
	user := Client(t, b.Addr(), name+"-user")
	h := Host(t, host.Config{Store: Client(t, b.Addr(), name+"-host"), Runtimes: runtimes})
	if err := h.LoadDir(ctx, dir); err != nil {
		t.Fatalf("loading %s: %v", dir, err)
	}
	return h, user
}
