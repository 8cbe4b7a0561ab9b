package host

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// leader is a rule that, on each trigger, takes the lock "leader" (no wait)
// and writes "shared" fenced with it, recording the status in result/<name>.
func leader(name string, ttl time.Duration) goRule {
	return goRule{init: watchInit("tick/" + name), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		status := abi.StatusOK
		if _, err := h.Lock(ctx, "leader", ttl, abi.LockOptions{}); err != nil {
			status = abi.StatusOf(err)
		} else if _, err := h.Set(ctx, "shared", []byte(name), abi.SetOptions{Fence: "leader"}); err != nil {
			status = abi.StatusOf(err)
		}
		_, err := h.Set(ctx, "result/"+name, []byte(status.String()+":"+string(ev.Value)), abi.SetOptions{})
		return err
	}}
}

// Two hosts fail over a lock; the old holder, unaware it lost the lease, writes
// late with its old token and the store refuses it (fencing), so the new
// holder's value stands.
func TestLockFailoverFencedByStore(t *testing.T) {
	a := newEnv(t)
	b := newEnvAt(t, a.addr)
	const ttl = time.Minute // no renewal happens during the test
	a.load("a", leader("a", ttl))
	b.load("b", leader("b", ttl))

	a.set("tick/a", "1")
	a.waitValue("result/a", "OK:1")
	a.waitValue("shared", "a")
	a.set("tick/b", "1")
	a.waitValue("result/b", "BUSY:1")

	a.leaseLostBehindHoldersBack("")
}

// leaseLostBehindHoldersBack runs the end of a fencing test whose rules a
// and b share the lock "leader", a holding it, each rule writing
// prefix+"result/<rule>" for a write to prefix+"tick/<rule>": the lease
// vanishes behind a's back (as if it expired during a pause) and b takes
// it; a still believes it holds the lock, so its late write reaches the
// store with the old token, which refuses it.
func (e *env) leaseLostBehindHoldersBack(prefix string) {
	e.t.Helper()
	if n, err := e.user.Del(e.ctx(), []byte("leader"), protocol.DelOptions{}); err != nil || n != 1 {
		e.t.Fatalf("del leader: %d, %v", n, err)
	}
	e.set(prefix+"tick/b", "2")
	e.waitValue(prefix+"result/b", "OK:2")
	e.waitValue("shared", "b")
	e.set(prefix+"tick/a", "2")
	e.waitValue(prefix+"result/a", "FENCED:2")
	if v, _ := e.get("shared"); v != "b" {
		e.t.Fatalf("shared = %q after the stale write; the old holder's write was applied", v)
	}
}

// A holder that loses its connection loses the lease when it expires; a
// waiting standby takes over with a larger token; the old holder gets a
// LOCK_LOST event and its fenced writes fail locally.
func TestLockExpiryFailover(t *testing.T) {
	base := newEnv(t)
	px := testnet.NewProxy(t, base.addr)
	a := newEnvAt(t, px.Addr())
	// The standby's handler waits for the lock far longer than the default
	// call timeout.
	b := newEnvAt(t, base.addr, func(o *Config) { o.Rules = map[string]RuleConfig{"standby.gorule": {Timeout: 30 * time.Second}} })
	const ttl = 400 * time.Millisecond

	var mu sync.Mutex
	var aToken string
	var lostEvents int
	var lateWrite error
	a.load("holder", goRule{init: watchInit("go/a"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		mu.Lock()
		defer mu.Unlock()
		if ev.Op == abi.OpLockLost {
			if ev.Key != "leader" {
				t.Errorf("LOCK_LOST for %q", ev.Key)
			}
			lostEvents++
			_, lateWrite = h.Set(ctx, "shared", []byte("a-late"), abi.SetOptions{Fence: "leader"})
			return nil
		}
		tok, err := h.Lock(ctx, "leader", ttl, abi.LockOptions{})
		aToken = tok
		return err
	}})
	tokens := make(chan string, 1)
	b.load("standby", goRule{init: watchInit("go/b"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		tok, err := h.Lock(ctx, "leader", ttl, abi.LockOptions{Wait: 20 * time.Second})
		if err != nil {
			return err
		}
		tokens <- tok
		_, err = h.Set(ctx, "shared", []byte("b"), abi.SetOptions{Fence: "leader"})
		return err
	}})

	base.set("go/a", "1")
	waitFor(t, "a holds the lock", func() bool { mu.Lock(); defer mu.Unlock(); return aToken != "" })
	// Renewals keep the lease alive: its version grows.
	first, _ := base.user.Get(base.ctx(), []byte("leader"), protocol.CallOptions{})
	waitFor(t, "a renews its lease", func() bool {
		res, err := base.user.Get(base.ctx(), []byte("leader"), protocol.CallOptions{})
		return err == nil && res.Found && res.Version.Compare(first.Version) > 0
	})

	px.Cut() // a is partitioned: its renewals fail, the lease expires in the store
	base.set("go/b", "1")
	var bToken string
	select {
	case bToken = <-tokens:
	case <-time.After(20 * time.Second):
		t.Fatal("standby never acquired the lock")
	}
	base.waitValue("shared", "b")
	ta, err1 := hlc.Parse(aToken)
	tb, err2 := hlc.Parse(bToken)
	if err1 != nil || err2 != nil || tb.Compare(ta) <= 0 {
		t.Fatalf("standby token %s not above old holder's %s", bToken, aToken)
	}
	waitFor(t, "old holder told LOCK_LOST", func() bool { mu.Lock(); defer mu.Unlock(); return lostEvents == 1 })
	mu.Lock()
	defer mu.Unlock()
	if abi.StatusOf(lateWrite) != abi.StatusLockLost {
		t.Fatalf("fenced write after the loss: %v, want LOCK_LOST", lateWrite)
	}
	if v, _ := base.get("shared"); v != "b" {
		t.Fatalf("shared = %q", v)
	}
}

func TestLockRenewUnlockAndBusy(t *testing.T) {
	e := newEnv(t)
	type result struct {
		tok string
		err error
	}
	results := make(chan result, 8)
	e.load("locker", goRule{init: watchInit("cmd"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		var r result
		switch string(ev.Value) {
		case "lock":
			r.tok, r.err = h.Lock(ctx, "L", 300*time.Millisecond, abi.LockOptions{})
		case "unlock":
			r.err = h.Unlock(ctx, "L")
		case "bad-ttl":
			r.tok, r.err = h.Lock(ctx, "L2", 0, abi.LockOptions{})
		case "fence-unheld":
			_, r.err = h.Set(ctx, "x", []byte("1"), abi.SetOptions{Fence: "nope"})
		}
		results <- r
		return nil
	}})
	do := func(cmd string) result {
		t.Helper()
		e.set("cmd", cmd)
		select {
		case r := <-results:
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no result", cmd)
		}
		return result{}
	}
	r := do("lock")
	if r.err != nil || r.tok == "" {
		t.Fatalf("lock: %+v", r)
	}
	holder, ok := e.get("L")
	if !ok || holder != e.client.ClientID()+":locker.gorule" {
		t.Fatalf("lock value %q, want <client id>:<rule>", holder)
	}
	// Held across several ttl periods thanks to renewals; the version grows.
	var last hlc.HLC
	renewals := 0
	waitFor(t, "three renewals", func() bool {
		res, err := e.user.Get(context.Background(), []byte("L"), protocol.CallOptions{})
		if err != nil || !res.Found {
			t.Fatalf("lease lapsed: %v %v", res, err)
		}
		if res.Version.Compare(last) > 0 {
			if !last.IsZero() {
				renewals++
			}
			last = res.Version
		}
		return renewals >= 3
	})
	if r := do("lock"); r.err != nil || r.tok == "" {
		t.Fatalf("re-lock of a held lock: %+v", r)
	}
	if r := do("unlock"); r.err != nil {
		t.Fatalf("unlock: %v", r.err)
	}
	if _, ok := e.get("L"); ok {
		t.Fatal("lock key still present after unlock")
	}
	if r := do("unlock"); abi.StatusOf(r.err) != abi.StatusNotFound {
		t.Fatalf("second unlock: %v", r.err)
	}
	if r := do("bad-ttl"); abi.StatusOf(r.err) != abi.StatusInvalid {
		t.Fatalf("zero ttl: %v", r.err)
	}
	if r := do("fence-unheld"); abi.StatusOf(r.err) != abi.StatusLockLost {
		t.Fatalf("fence with an unheld lock: %v", r.err)
	}
	// Held by someone else: BUSY.
	if _, err := e.user.Set(e.ctx(), []byte("L"), []byte("other"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := do("lock"); abi.StatusOf(r.err) != abi.StatusBusy {
		t.Fatalf("lock held by another: %v", r.err)
	}
}

// fakeClock is a lease clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Now()} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// withClock times the host's leases with c.
func withClock(c *fakeClock) func(*Config) { return func(o *Config) { o.now = c.Now } }

// lockHost loads the rule name, which records the abi.Host the host gives
// it and the LOCK_LOST events it receives; the test calls that Host itself.
func (e *env) lockHost(name string) (abi.Host, <-chan abi.Event) {
	e.t.Helper()
	var h abi.Host
	lost := make(chan abi.Event, 16)
	e.load(name, goRule{
		init: func(_ context.Context, host abi.Host) error { h = host; return nil },
		handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
			if ev.Op == abi.OpLockLost {
				lost <- ev
			}
			return nil
		},
	})
	return h, lost
}

// requests counts the store requests the host's client has sent.
func (e *env) requests() uint64 { return e.client.Stats().Requests }

func waitLockLost(t *testing.T, lost <-chan abi.Event, name string) {
	t.Helper()
	select {
	case ev := <-lost:
		if ev.Key != name {
			t.Fatalf("LOCK_LOST for %q, want %q", ev.Key, name)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no LOCK_LOST event for %q", name)
	}
}

// A host that was paused past its lease's expiry (here: its lease clock
// moves on while the store's does not, and the lease is handed to another
// holder who has not yet written the guarded key) must not write with its
// old token: the store would accept it, since it never saw a newer token on
// that key. The fenced write fails locally with LOCK_LOST without reaching
// the store, and the rule gets its LOCK_LOST event.
func TestFencedWriteAfterLocalExpiryFailsLocally(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, withClock(clk))
	h, lost := e.lockHost("holder")
	const ttl = 10 * time.Minute // no renewal falls due while the test runs

	if _, err := h.Lock(e.ctx(), "leader", ttl, abi.LockOptions{}); err != nil {
		t.Fatalf("lock: %v", err)
	}
	if _, err := h.Set(e.ctx(), "shared", []byte("a1"), abi.SetOptions{Fence: "leader"}); err != nil {
		t.Fatalf("fenced write while holding: %v", err)
	}
	before, err := e.user.Get(e.ctx(), []byte("shared"), protocol.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// The pause: a full ttl passes for the holder. Meanwhile the lease
	// expired in the store and another holder took it; it has not written
	// "shared" yet.
	clk.Advance(ttl)
	if n, err := e.user.Del(e.ctx(), []byte("leader"), protocol.DelOptions{}); err != nil || n != 1 {
		t.Fatalf("del leader: %d, %v", n, err)
	}
	if res, err := e.user.Set(e.ctx(), []byte("leader"), []byte("other"), protocol.SetOptions{Condition: protocol.CondNX, Expiry: time.Minute}); err != nil || !res.Applied {
		t.Fatalf("other holder's lock: %+v, %v", res, err)
	}

	sent := e.requests()
	for _, w := range []struct {
		verb  string
		write func() error
	}{
		{"set", func() error {
			_, err := h.Set(e.ctx(), "shared", []byte("a-late"), abi.SetOptions{Fence: "leader"})
			return err
		}},
		{"del", func() error { return h.Del(e.ctx(), "shared", abi.DelOptions{Fence: "leader"}) }},
		{"vdel", func() error { return h.VDel(e.ctx(), "shared", []byte("a1"), abi.DelOptions{Fence: "leader"}) }},
	} {
		if err := w.write(); abi.StatusOf(err) != abi.StatusLockLost {
			t.Errorf("fenced %s after the lease's expiry: %v, want LOCK_LOST", w.verb, err)
		}
	}
	if n := e.requests() - sent; n != 0 {
		t.Errorf("the refused writes sent %d request(s) to the store, want none", n)
	}
	after, err := e.user.Get(e.ctx(), []byte("shared"), protocol.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if string(after.Value) != "a1" || after.Version != before.Version {
		t.Fatalf("shared = %q (version %s), want the state before the pause: %q (version %s)", after.Value, after.Version, before.Value, before.Version)
	}
	waitLockLost(t, lost, "leader")
	if v, _ := e.get("leader"); v != "other" {
		t.Fatalf("lock key = %q, want the other holder's", v)
	}
}

// Locking a lock whose lease may have expired (no renewal confirmed within
// the ttl minus the safety margin) takes the lease again, with a new token,
// instead of returning the stale one; the rule gets LOCK_LOST for the lease
// it had. Up to the margin the lease counts as held: the same token comes
// back without a store request.
func TestReLockAfterLocalExpiryReacquires(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, withClock(clk))
	h, lost := e.lockHost("holder")
	const ttl = 10 * time.Minute

	tok1, err := h.Lock(e.ctx(), "leader", ttl, abi.LockOptions{})
	if err != nil {
		t.Fatalf("lock: %v", err)
	}
	clk.Advance(ttl - lease.Margin(ttl) - time.Nanosecond)
	sent := e.requests()
	if tok, err := h.Lock(e.ctx(), "leader", ttl, abi.LockOptions{}); err != nil || tok != tok1 {
		t.Fatalf("re-lock within the lease: %q, %v; want the held token %q", tok, err, tok1)
	}
	if n := e.requests() - sent; n != 0 {
		t.Fatalf("re-lock of a held lease sent %d request(s)", n)
	}
	select {
	case ev := <-lost:
		t.Fatalf("LOCK_LOST %+v while the lease is held", ev)
	default:
	}

	clk.Advance(time.Nanosecond) // the lease may have expired now
	tok2, err := h.Lock(e.ctx(), "leader", ttl, abi.LockOptions{})
	if err != nil {
		t.Fatalf("re-lock after the lease's expiry: %v", err)
	}
	t1, err1 := hlc.Parse(tok1)
	t2, err2 := hlc.Parse(tok2)
	if err1 != nil || err2 != nil || t2.Compare(t1) <= 0 {
		t.Fatalf("re-lock after expiry returned %q, want a new token above %q", tok2, tok1)
	}
	res, err := e.user.Get(e.ctx(), []byte("leader"), protocol.CallOptions{})
	if err != nil || !res.Found || res.Version.String() != tok2 {
		t.Fatalf("lock key: %+v, %v; want version %s", res, err, tok2)
	}
	waitLockLost(t, lost, "leader")
	// The new lease fences writes.
	if _, err := h.Set(e.ctx(), "shared", []byte("x"), abi.SetOptions{Fence: "leader"}); err != nil {
		t.Fatalf("fenced write under the new lease: %v", err)
	}
}

// The renewal goroutine does not revive a lease that may have expired: a
// NEX renewal would succeed if nobody took the key meanwhile, and the rule
// would believe it held the lock throughout. It reports the loss instead.
func TestRenewalDoesNotReviveAPossiblyExpiredLease(t *testing.T) {
	clk := newFakeClock()
	e := newEnv(t, withClock(clk))
	h, lost := e.lockHost("holder")
	const ttl = 300 * time.Millisecond // renewals fall due every 100 ms

	if _, err := h.Lock(e.ctx(), "leader", ttl, abi.LockOptions{}); err != nil {
		t.Fatalf("lock: %v", err)
	}
	clk.Advance(ttl)
	waitLockLost(t, lost, "leader")
	if got := e.logLines("lock lost", "may have expired"); len(got) == 0 {
		t.Fatalf("no log line says the lease may have expired:\n%s", e.logs)
	}
	if _, err := h.Set(e.ctx(), "shared", []byte("x"), abi.SetOptions{Fence: "leader"}); abi.StatusOf(err) != abi.StatusLockLost {
		t.Fatalf("fenced write after the loss: %v, want LOCK_LOST", err)
	}
}

// Taking a lease writes its key, so lock needs write permission on it as
// well as lock permission, and unlock likewise. A denied lock is refused
// before any store request: it neither creates the key nor tells an absent
// key from a present one.
func TestLockNeedsWritePermission(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{
			"reader.gorule": {Write: []string{}},                                              // lock: absent (any key)
			"writer.gorule": {Write: []string{"app/**"}, Lock: []string{"app/**", "priv/**"}}, // lock wider than write
		}
	})
	e.set("priv/existing", "held by another system")
	reader, _ := e.lockHost("reader")
	writer, _ := e.lockHost("writer")

	sent := e.requests()
	var msgs []string
	for _, c := range []struct {
		h   abi.Host
		key string
	}{{reader, "priv/newkey"}, {reader, "priv/existing"}, {writer, "priv/newkey"}, {writer, "priv/existing"}} {
		_, err := c.h.Lock(e.ctx(), c.key, time.Minute, abi.LockOptions{})
		if abi.StatusOf(err) != abi.StatusDenied {
			t.Errorf("lock %q without write permission: %v, want DENIED", c.key, err)
			continue
		}
		msgs = append(msgs, strings.Replace(err.Error(), c.key, "KEY", 1))
		if err := c.h.Unlock(e.ctx(), c.key); abi.StatusOf(err) != abi.StatusDenied {
			t.Errorf("unlock %q without write permission: %v, want DENIED", c.key, err)
		}
	}
	if n := e.requests() - sent; n != 0 {
		t.Errorf("denied locks sent %d request(s) to the store, want none", n)
	}
	if _, ok := e.get("priv/newkey"); ok {
		t.Error("a denied lock created its key")
	}
	// Same answer whether the key exists or not.
	if len(msgs) == 4 && (msgs[0] != msgs[1] || msgs[2] != msgs[3]) {
		t.Errorf("denials differ by whether the key exists: %q", msgs)
	}
	if len(msgs) > 0 && !strings.Contains(msgs[0], "write") {
		t.Errorf("denial %q does not say write permission is needed", msgs[0])
	}
	// With both permissions, lock and unlock work.
	if _, err := writer.Lock(e.ctx(), "app/leader", time.Minute, abi.LockOptions{}); err != nil {
		t.Fatalf("lock with write and lock permission: %v", err)
	}
	if err := writer.Unlock(e.ctx(), "app/leader"); err != nil {
		t.Fatalf("unlock: %v", err)
	}
}
