// Package examplehost starts what the examples' end-to-end tests run on:
// clients connected to the embedded broker, and a host with the runtimes
// under test. Everything is closed when the test ends.
package examplehost

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

// Client returns a client of the broker at addr with client id, connected
// (within 10 s) and closed when the test ends. Its log is discarded; opts
// change the rest of its configuration.
func Client(t testing.TB, addr, id string, opts ...func(*protocol.Config)) *protocol.Client {
	t.Helper()
	cfg := protocol.Config{Servers: []string{addr}, ClientID: id, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, o := range opts {
		o(&cfg)
	}
	c, err := protocol.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

// Host returns a host with opts, closed when the test ends: a Close that
// fails (within 10 s) fails the test. Without a Logger it logs to t.Log.
// Runtimes closed in a cleanup registered before Host are closed after the
// host.
func Host(t testing.TB, opts host.Config) *host.Host {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(LogWriter(t), nil))
	}
	h, err := host.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Close(ctx); err != nil {
			t.Errorf("closing host: %v", err)
		}
	})
	return h
}

// WaitFor polls cond until it holds, failing the test after 20 s.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// LogWriter returns a writer that sends each write (a log line) to t.Log.
func LogWriter(t testing.TB) io.Writer { return testLog{t} }

type testLog struct{ t testing.TB }

func (w testLog) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
