package host

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/protocol"
)

// A host call's error tells why it failed by its cause, not only by its
// status: a get while the store is offline is protocol.ErrNotConnected, a
// lock wait cut short by the call's deadline is context.DeadlineExceeded.
func TestHostCallErrorsUnwrapToTheirCause(t *testing.T) {
	b := newEnv(t) // broker and user client; the host under test goes through a proxy
	px := testnet.NewProxy(t, b.addr)
	e := newEnvAt(t, px.Addr())
	var mu sync.Mutex
	var host abi.Host
	e.load("caller", goRule{init: func(_ context.Context, h abi.Host) error {
		mu.Lock()
		defer mu.Unlock()
		host = h
		return nil
	}})
	mu.Lock()
	h := host
	mu.Unlock()

	// Another holder keeps the lock: the wait ends with the call's context.
	if _, err := b.user.Set(b.ctx(), []byte("lk"), []byte("someone else"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := h.Lock(ctx, "lk", time.Minute, abi.LockOptions{Wait: time.Hour})
	if abi.StatusOf(err) != abi.StatusTimeout || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("lock cut short by its deadline: %v (status %v), want TIMEOUT caused by context.DeadlineExceeded", err, abi.StatusOf(err))
	}

	px.Cut()
	waitFor(t, "disconnect noticed", func() bool {
		_, err := e.client.Get(context.Background(), []byte("x"), protocol.CallOptions{})
		return errors.Is(err, protocol.ErrNotConnected)
	})
	_, err = h.Get(e.ctx(), "k")
	if abi.StatusOf(err) != abi.StatusUnavailable || !errors.Is(err, protocol.ErrNotConnected) {
		t.Fatalf("get while offline: %v (status %v), want UNAVAILABLE caused by protocol.ErrNotConnected", err, abi.StatusOf(err))
	}
	px.Heal()
}
