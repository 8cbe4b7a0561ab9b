package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/protocol"
)

// copyRule watches in and copies each value to out, after init.
func copyRule(init func(context.Context, abi.Host) error) goRule {
	return goRule{
		init: func(ctx context.Context, h abi.Host) error {
			if err := init(ctx, h); err != nil {
				return err
			}
			return h.Watch(ctx, "in", abi.WatchOptions{})
		},
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			_, err := h.Set(ctx, "out", ev.Value, abi.SetOptions{})
			return err
		},
	}
}

// put writes a rule file holding the rule's name and loads it, returning
// its path and the load's error.
func (e *env) put(name string) (string, error) {
	e.t.Helper()
	p := filepath.Join(e.dir, name+".gorule")
	if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p, e.host.Load(e.ctx(), p)
}

// A rule whose initialisation fails twice, then succeeds (a store it reads
// at start that is not ready yet), is loaded again until it starts: it
// then handles an event, Status shows it running, and Stats counts one
// retry. Before, it stayed failed until its file changed.
func TestRetryStartsRuleWhoseStartFailed(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.LoadRetry = 5 * time.Millisecond })
	var starts atomic.Int64
	e.rt.register("flaky", copyRule(func(context.Context, abi.Host) error {
		if n := starts.Add(1); n <= 2 {
			return fmt.Errorf("not ready yet (start %d)", n)
		}
		return nil
	}))
	if _, err := e.put("flaky"); err == nil || !strings.Contains(err.Error(), "not ready yet (start 1)") {
		t.Fatalf("the first load: %v", err)
	}
	waitFor(t, "the rule running", func() bool { return e.status("flaky").State == StateRunning })
	if n := starts.Load(); n != 3 {
		t.Fatalf("%d starts, want 3", n)
	}
	if n := e.host.Stats().LoadRetries; n != 1 {
		t.Fatalf("Stats.LoadRetries = %d, want 1", n)
	}
	e.set("in", "v1")
	e.waitValue("out", "v1")
	if s := e.status("flaky"); !s.NextRetry.IsZero() || s.LastError != "" {
		t.Fatalf("status of the running rule: %+v", s)
	}
}

// What cannot pass by waiting is not retried: a file that does not compile
// (here, no rule of that name), and a reload whose new version fails to
// start (the previous version runs). Neither is scheduled, and Status
// shows no next try.
func TestRetryNotForCompileErrorOrFailedReload(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.LoadRetry = time.Hour })
	p, err := e.put("nosuchrule")
	var ce *abi.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("load: %v, want a compile error", err)
	}
	if at := e.host.outcomes.Retries.At(p); !at.IsZero() {
		t.Fatalf("a compile error retried at %v", at)
	}
	if st := e.host.Status(); len(st) != 1 || !st[0].NextRetry.IsZero() {
		t.Fatalf("status: %+v", st)
	}

	var fail atomic.Bool
	e.rt.register("r", copyRule(func(context.Context, abi.Host) error {
		if fail.Load() {
			return errors.New("new version fails")
		}
		return nil
	}))
	rp, err := e.put("r")
	if err != nil {
		t.Fatal(err)
	}
	fail.Store(true)
	if err := os.WriteFile(rp, []byte("r\n"), 0o644); err != nil { // new content, same rule
		t.Fatal(err)
	}
	if err := e.host.Load(e.ctx(), rp); err == nil {
		t.Fatal("the reload succeeded")
	}
	if at := e.host.outcomes.Retries.At(rp); !at.IsZero() {
		t.Fatalf("a failed reload retried at %v", at)
	}
	if s := e.status("r"); s.State != StateReloadFailed || !s.NextRetry.IsZero() {
		t.Fatalf("status: %+v", s)
	}
}

// A rule that reads the store when it starts fails to load while the store
// is unreachable; Status lists the failure with its next try, minutes away
// (the first wait set to the longest); the reconnection loads it at once,
// and it handles an event. Removing a failed rule cancels its retry.
func TestRetryOnReconnect(t *testing.T) {
	b := brokertest.Start(t)
	p := testnet.NewProxy(t, b.Addr())
	e := newEnvAt(t, p.Addr(), func(c *Config) { c.LoadRetry = MaxLoadRetry })
	e.user = newClient(t, b.Addr()) // the user's client is not cut
	e.rt.register("reads", copyRule(func(ctx context.Context, h abi.Host) error {
		if _, err := h.Get(ctx, "cfg"); err != nil && abi.StatusOf(err) != abi.StatusNotFound {
			return fmt.Errorf("read cfg: %w", err)
		}
		return nil
	}))
	p.Cut()
	waitFor(t, "the host's client offline", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := e.client.Get(ctx, []byte("cfg"), protocol.CallOptions{})
		return errors.Is(err, protocol.ErrNotConnected)
	})
	path, err := e.put("reads")
	if err == nil || !strings.Contains(err.Error(), "read cfg") {
		t.Fatalf("load while offline: %v", err)
	}
	if st := e.host.Status(); len(st) != 1 || st[0].Path != path || st[0].State != StateLoadFailed || time.Until(st[0].NextRetry) < time.Minute {
		t.Fatalf("status while offline: %+v; want the failure, next try minutes away", st)
	}
	p.Heal()
	waitFor(t, "the rule running after the reconnection", func() bool { return e.status("reads").State == StateRunning })
	e.set("in", "back")
	e.waitValue("out", "back")

	e.rt.register("never", copyRule(func(context.Context, abi.Host) error { return errors.New("never starts") }))
	np, err := e.put("never")
	if err == nil || e.host.outcomes.Retries.At(np).IsZero() {
		t.Fatalf("load: %v; retry at %v", err, e.host.outcomes.Retries.At(np))
	}
	if err := os.Remove(np); err != nil {
		t.Fatal(err)
	}
	e.host.reconcile(e.ctx(), np)
	if at := e.host.outcomes.Retries.At(np); !at.IsZero() {
		t.Fatalf("removed, still retried at %v", at)
	}
}

// In a group, a rule whose start failed on its owner, no other member
// offering it, is retried there (a retry is a Load, which loads a rule
// this host owns) and runs: it handles an event on that host.
func TestGroupRetriesOwnedRuleWhoseStartFailed(t *testing.T) {
	c := newCluster(t, 0, groupTestTTL)
	var starts atomic.Int64
	c.custom = map[string]func(int) goRule{"once": func(i int) goRule {
		return goRule{
			init: func(ctx context.Context, h abi.Host) error {
				if starts.Add(1) == 1 {
					return errors.New("the first start fails")
				}
				return watchInit("in/x")(ctx, h)
			},
			handle: c.handler(i, "x"),
		}
	}}
	c.files = func(int) map[string]string { return map[string]string{"once.gorule": "once"} }
	m := c.start()
	runsOn(t, c, "once.gorule", 0)
	handles(t, c, "1", 0)
	if n := m.host.Stats().LoadRetries; n != 1 || starts.Load() != 2 {
		t.Fatalf("%d retries, %d starts; want 1, 2", n, starts.Load())
	}
}

// A start stuck past its deadline and grace (the runtime ignores it) is not
// retried: each try could leave another call blocked.
func TestRetryNotForStuckStart(t *testing.T) {
	e, rt := stuckEnv(t, func(c *Config) { c.LoadRetry = time.Millisecond })
	p := e.writeStuck("s", "start")
	var err error
	within(t, stuckBound, "Load", func() { err = e.host.Load(e.ctx(), p) })
	var se *StuckError
	if !errors.As(err, &se) {
		t.Fatalf("load: %v, want a *StuckError", err)
	}
	rt.waitBlocked(t, "start s.stuck")
	if at := e.host.outcomes.Retries.At(p); !at.IsZero() {
		t.Fatalf("a stuck start retried at %v", at)
	}
}
