// Package inproctest gives tests a state store client in the same process:
// the store engine behind inproc, no broker, no MQTT. Only tests import it.
package inproctest

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ssrun/ssrun/inproc"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/store"
)

// Server returns an in-process server of a store without quotas, on the
// clock now.
func Server(now func() time.Time) *inproc.Server {
	return inproc.New(store.New(now, store.Quota{Keys: -1, Bytes: -1}))
}

// Client connects a client named id to srv, reading the clock now, and
// closes it when the test ends. Its log is discarded.
func Client(tb testing.TB, srv *inproc.Server, id string, now func() time.Time) *protocol.Client {
	tb.Helper()
	cfg := protocol.Config{ClientID: id, Now: now, Logger: slog.New(slog.DiscardHandler)}
	c, err := protocol.NewLocal(context.Background(), cfg, srv)
	if err != nil {
		tb.Fatalf("client %s of an in-process store: %v", id, err)
	}
	testutil.CloseAtEnd(tb, id, func(context.Context) error { return c.Close() })
	return c
}
