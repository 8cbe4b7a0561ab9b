// Package protocoltest holds what tests of other packages need of a state
// store client: one connected to a broker, closed when the test ends.
package protocoltest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol"
)

// ConnectBound is how long Connect waits for the connection before it fails
// the test: long, as a loaded CI machine may take seconds, and only a
// failing test waits it out.
const ConnectBound = 30 * time.Second

// Connect returns a client made with cfg, connected (subscribed: calls can
// be made) within ConnectBound and closed when tb ends. A nil cfg.Logger
// discards the client's log.
func Connect(tb testing.TB, cfg protocol.Config) *protocol.Client {
	tb.Helper()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	c, err := protocol.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), ConnectBound)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		tb.Fatal(err)
	}
	return c
}
