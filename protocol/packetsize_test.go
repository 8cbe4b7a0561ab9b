package protocol

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
)

// A request whose packet would exceed the maximum packet size the broker
// announced in its CONNACK (the embedded broker's 4 MiB) is refused before
// it is sent, with a *TooLargeError naming both sizes: the connection stays
// up, nothing is written, the observer counts it as too_large, and the next
// request works. The client measures
// the packet exactly: a value that makes it exactly the maximum is sent and
// stored, one byte more is refused.
func TestRequestOverMaxPacketSizeRefusedUnsent(t *testing.T) {
	b := brokertest.Start(t)
	rec := &recorder{}
	c := connect(t, b.Addr(), func(cfg *Config) { cfg.Observer = rec })
	ctx := context.Background()
	if max, ok := c.MaxPacketSize(); !ok || max != broker.MaxPacketSize {
		t.Fatalf("MaxPacketSize() = %d, %v; want the broker's %d", max, ok, broker.MaxPacketSize)
	}
	key := []byte("big")
	_, err := c.Set(ctx, key, make([]byte, 4<<20+512<<10), SetOptions{}) // 4.5 MiB
	var tl *TooLargeError
	if !errors.As(err, &tl) || !errors.Is(err, ErrTooLarge) || tl.Max != broker.MaxPacketSize || tl.Size <= tl.Max {
		t.Fatalf("set of 4.5 MiB: %v; want a *TooLargeError over %d", err, broker.MaxPacketSize)
	}
	if msg := err.Error(); !strings.Contains(msg, `set key "big"`) || !strings.Contains(msg, "maximum packet size of 4194304 bytes") {
		t.Errorf("error %q does not name the command, the key and the limit", msg)
	}
	// The packet's size less the value's is what the request costs besides
	// the value (the length of the value's length differs by nothing here).
	overhead := tl.Size - (4<<20 + 512<<10)
	fits := broker.MaxPacketSize - overhead
	if _, err := c.Set(ctx, key, make([]byte, fits+1), SetOptions{}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("set of a value one byte over the packet limit: %v, want ErrTooLarge", err)
	}
	if _, err := c.Set(ctx, key, make([]byte, fits), SetOptions{}); err != nil {
		t.Fatalf("set of a value making the packet exactly the limit: %v", err)
	}
	g, err := c.Get(ctx, key, CallOptions{})
	if err != nil || len(g.Value) != fits {
		t.Fatalf("get: %d bytes, %v; want the %d just set", len(g.Value), err, fits)
	}
	if got, want := rec.list(), []string{"set too_large", "set too_large", "set ok", "get ok"}; !equalStrings(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
	if s := c.Stats(); s.Reconnects != 0 || s.ConnectionLost != 0 || s.Requests != 2 {
		t.Fatalf("stats %+v: want 2 requests sent (the refused ones not), on the first connection", s)
	}
}
