package lease

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/inproc/inproctest"
)

// Margin is ttl/1000 for drift plus min(100 ms, ttl/4) for the send, as its
// doc says, and stays under ttl/3.
func TestMargin(t *testing.T) {
	for _, c := range []struct{ ttl, want time.Duration }{
		{time.Second, 101 * time.Millisecond},
		{10 * time.Second, 110 * time.Millisecond},
		{100 * time.Millisecond, 100*time.Microsecond + 25*time.Millisecond},
		{time.Millisecond, time.Microsecond + 250*time.Microsecond},
	} {
		if got := Margin(c.ttl); got != c.want {
			t.Errorf("Margin(%v) = %v, want %v", c.ttl, got, c.want)
		}
		if Margin(c.ttl) >= c.ttl/3 {
			t.Errorf("Margin(%v) = %v, not under ttl/3", c.ttl, Margin(c.ttl))
		}
	}
}

// noWaits is a Waiter for leases that never wait (wait 0).
type noWaits struct{ t *testing.T }

func (w noWaits) WaitDelete(context.Context, string, func()) (func(), error) {
	w.t.Fatal("a lock without a wait waited")
	return nil, nil
}

// newLeases returns the leases of rule "r.lua" on a store in process, on
// a virtual clock that is also their lease clock.
func newLeases(t *testing.T) (*Leases, *clock.Virtual) {
	t.Helper()
	vc := clock.NewVirtual(time.Unix(1_700_000_000, 0))
	c := inproctest.Client(t, inproctest.Server(vc.Now), "host", vc.Now)
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ls := New(&Services{Ctx: ctx, Client: c, Log: log, Waits: noWaits{t}, Clock: vc, Now: vc.Now}, "r.lua", nil)
	t.Cleanup(func() { ls.ReleaseAll(context.Background()) })
	return ls, vc
}

// A lock held fences writes with its token until the lease may have
// expired (ttl minus Margin on the lease clock); then a fenced write fails
// with LOCK_LOST and the lease waits to be taken for its event.
func TestFenceTokenUntilTheLeaseMayHaveExpired(t *testing.T) {
	ls, vc := newLeases(t)
	ctx := context.Background()
	const ttl = time.Minute
	tok, err := ls.Lock(ctx, "leader", ttl, 0)
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	if got := ls.Holder(); got != "host:r.lua" {
		t.Fatalf("holder %q, want host:r.lua", got)
	}
	if names := ls.Names(); len(names) != 1 || names[0] != "leader" {
		t.Fatalf("names %q, want [leader]", names)
	}
	if ft, err := ls.FenceToken("set", "k", "leader"); err != nil || ft.String() != tok {
		t.Fatalf("fence token %v, %v; want %s", ft, err, tok)
	}
	if _, err := ls.FenceToken("set", "k", "other"); abi.StatusOf(err) != abi.StatusLockLost {
		t.Fatalf("fenced with a lock not held: %v, want LOCK_LOST", err)
	}
	if ls.Losing() {
		t.Fatal("a lease waits as lost while held")
	}

	vc.Set(vc.Now().Add(ttl - Margin(ttl))) // no renewal ran: the virtual clock fired nothing
	if _, err := ls.FenceToken("set", "k", "leader"); abi.StatusOf(err) != abi.StatusLockLost {
		t.Fatalf("fenced once the lease may have expired: %v, want LOCK_LOST", err)
	}
	if !ls.Losing() {
		t.Fatal("the lapsed lease does not wait for its LOCK_LOST")
	}
	select {
	case <-ls.LostSignal():
	default:
		t.Fatal("LostSignal not signalled")
	}
	lost := ls.TakeLost()
	if len(lost) != 1 || lost[0].Name != "leader" {
		t.Fatalf("lost %+v, want leader", lost)
	}
	if l := ls.Get("leader"); l == nil || !l.IsLost() {
		t.Fatalf("lease %+v: want it kept, lost", l)
	}
}

// A lock held by another holder is BUSY without a wait; Unlock of a lock
// not held is NOT_FOUND.
func TestLockBusyAndUnlockNotHeld(t *testing.T) {
	ls, _ := newLeases(t)
	ctx := context.Background()
	if _, err := ls.Lock(ctx, "leader", time.Minute, 0); err != nil {
		t.Fatalf("lock: %v", err)
	}
	other := New(ls.svc, "s.lua", nil)
	if _, err := other.Lock(ctx, "leader", time.Minute, 0); abi.StatusOf(err) != abi.StatusBusy {
		t.Fatalf("lock held by another rule: %v, want BUSY", err)
	}
	if err := other.Unlock(ctx, "leader"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Fatalf("unlock not held: %v, want NOT_FOUND", err)
	}
	if err := ls.Unlock(ctx, "leader"); err != nil {
		t.Fatalf("unlock: %v", err)
	}
	if _, err := other.Lock(ctx, "leader", time.Minute, 0); err != nil {
		t.Fatalf("lock once released: %v", err)
	}
	other.ReleaseAll(ctx)
}
