// Package brokertest starts the embedded state store broker for tests.
package brokertest

import (
	"log/slog"
	"net"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/internal/testutil"
)

// Start runs a broker on a random loopback port (127.0.0.1:0) and closes it
// when the test ends. Options adjust the config before New; by default the
// broker logs to t.Log. It fails t if the broker cannot start.
func Start(t testing.TB, opts ...func(*broker.Config)) *broker.Broker {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("brokertest: listen: %v", err)
	}
	cfg := broker.Config{
		Listener: ln,
		Logger:   slog.New(slog.NewTextHandler(testutil.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := broker.New(cfg)
	if err != nil {
		_ = ln.Close()
		t.Fatalf("brokertest: new broker: %v", err)
	}
	if err := b.Start(); err != nil {
		_ = b.Close()
		t.Fatalf("brokertest: start broker: %v", err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("brokertest: close broker: %v", err)
		}
	})
	return b
}
