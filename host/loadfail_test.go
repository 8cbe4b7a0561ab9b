package host

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// liveTasks returns what the host's call tracker still counts as running
// (workers, compiles, starts, closes).
func liveTasks(h *Host) []string { return h.calls.Live() }

// TestFailedFirstLoadLeavesNothing loads a rule whose first load fails
// after its initialisation took a lock, watched a key and armed a timer:
// the caller's context ends during the initialisation, which then fails
// (start) or returns (the install finds the context ended). Either way
// nothing of the rule may stay: no worker goroutine, no lock in the
// store, no watch registered, no timer scheduled, no slot; only its entry
// in StateLoadFailed. Loaded again with a live context, it runs.
func TestFailedFirstLoadLeavesNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		initErr bool   // the initialisation fails once the context ended
		want    string // in the load's error
	}{
		{name: "start fails", initErr: true, want: "start "},
		{name: "install cancelled", initErr: false, want: "install "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			lock := "lf/lock"
			var cancelLoad context.CancelFunc
			fail := true // the first load only; read and written by the loads, one at a time
			e.rt.register("lf", goRule{init: func(ctx context.Context, h abi.Host) error {
				if _, err := h.Lock(ctx, lock, 30*time.Second, abi.LockOptions{}); err != nil {
					return err
				}
				if err := h.Watch(ctx, "lf/in", abi.WatchOptions{}); err != nil {
					return err
				}
				if err := h.Timer(ctx, "tick", time.Hour, abi.TimerOptions{}); err != nil {
					return err
				}
				if !fail {
					return nil
				}
				fail = false
				cancelLoad() // the caller gives up while the rule starts
				if tc.initErr {
					<-ctx.Done()
					return ctx.Err()
				}
				return nil
			}})
			p := filepath.Join(e.dir, "lf.gorule")
			e.write(p, "lf")
			ctx, cancel := context.WithCancel(context.Background())
			cancelLoad = cancel
			err := e.host.Load(ctx, p)
			cancel()
			if err == nil {
				t.Fatal("load succeeded with its context cancelled during the rule's start")
			}
			if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), tc.want+p) {
				t.Errorf("load error = %v, want context.Canceled and %q", err, tc.want+p)
			}
			if tasks := liveTasks(e.host); len(tasks) != 0 {
				t.Errorf("still running after the failed load: %q", tasks)
			}
			if v, found := e.get(lock); found {
				t.Errorf("lock %s still held in the store after the failed load (holder %q)", lock, v)
			}
			if n := e.host.reg.WatchedKeys(); n != 0 {
				t.Errorf("%d watched keys registered after the failed load", n)
			}
			if n := e.host.timers.Pending(); n != 0 {
				t.Errorf("%d timers scheduled after the failed load", n)
			}
			if _, _, _, found := e.record("lf.gorule", "tick"); found {
				t.Error("the timer the failed load armed is still in the store")
			}
			if names := e.indexed("lf.gorule"); len(names) != 0 {
				t.Errorf("the store's timer index still lists %q after the failed load", names)
			}
			if _, found := e.get(timers.TimerDirKey("lf.gorule")); found {
				t.Error("the timer directory of the failed rule is still in the store")
			}
			if r := e.host.ruleAt(p); r != nil {
				t.Errorf("the failed rule has a slot: %v", r)
			}
			st := e.host.Status()
			if len(st) != 1 || st[0].State != StateLoadFailed {
				t.Fatalf("status = %+v, want one rule in %q", st, StateLoadFailed)
			}

			// The file loads with a live context: the lock is free for it.
			if err := e.host.Load(e.ctx(), p); err != nil {
				t.Fatalf("second load: %v", err)
			}
			if s := e.status("lf"); s.State != StateRunning || len(s.Locks) != 1 || len(s.Watches) != 1 || s.Timers != 1 {
				t.Fatalf("after the second load: %+v", s)
			}
		})
	}
}

// storedTimers reads the raw records of rule's timers names from the
// store (absent: not in the map).
func (e *env) storedTimers(rule string, names ...string) map[string]string {
	e.t.Helper()
	out := map[string]string{}
	for _, n := range names {
		res, err := e.user.Get(e.ctx(), []byte(timers.TimerKey(rule, n)), protocol.CallOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if res.Found {
			out[n] = string(res.Value)
		}
	}
	return out
}

// TestFailedFirstLoadAfterRestartKeepsTimers runs a rule that arms
// timers, stops the host (the timers stay in the store, durable), and
// starts another host on the same store whose first load of the rule
// fails after its start re-armed one of those timers, cancelled another,
// re-armed one whose record does not decode, and armed a new one. The
// failed load undoes exactly those calls: the earlier records are back as
// they were (index included), the new timer is gone, nothing is
// scheduled; the next load that succeeds gets the earlier timers.
func TestFailedFirstLoadAfterRestartKeepsTimers(t *testing.T) {
	b := brokertest.Start(t)
	const rule = "keep.gorule"
	names := []string{"kept", "rearmed", "cancelled", "junk", "new"}

	first := newEnvAt(t, b.Addr())
	first.load("keep", goRule{init: func(ctx context.Context, h abi.Host) error {
		for _, n := range []string{"kept", "rearmed", "cancelled", "junk"} {
			if err := h.Timer(ctx, n, time.Hour, abi.TimerOptions{Every: time.Minute, Payload: []byte("v1 " + n)}); err != nil {
				return err
			}
		}
		return nil
	}})
	if err := first.host.Close(first.ctx()); err != nil {
		t.Fatal(err)
	}
	// A record another format version wrote: kept byte for byte.
	if _, err := first.user.Set(first.ctx(), []byte(timers.TimerKey(rule, "junk")), []byte("\x07not a record"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	before := first.storedTimers(rule, names...)
	if len(before) != 4 {
		t.Fatalf("stored before the restart: %q", before)
	}
	wantIndex := []string{"cancelled", "junk", "kept", "rearmed"}
	if got := first.indexed(rule); !slices.Equal(got, wantIndex) {
		t.Fatalf("index before the restart = %q, want %q", got, wantIndex)
	}

	e := newEnvAt(t, b.Addr())
	boom := errors.New("boom")
	e.rt.register("keep", goRule{init: func(ctx context.Context, h abi.Host) error {
		if err := h.Timer(ctx, "rearmed", 2*time.Hour, abi.TimerOptions{Payload: []byte("v2")}); err != nil {
			return err
		}
		if err := h.Cancel(ctx, "cancelled"); err != nil {
			return err
		}
		if err := h.Timer(ctx, "junk", time.Hour, abi.TimerOptions{}); err != nil {
			return err
		}
		if err := h.Timer(ctx, "new", time.Hour, abi.TimerOptions{}); err != nil {
			return err
		}
		if err := h.Timer(ctx, "new", 3*time.Hour, abi.TimerOptions{}); err != nil { // twice: undone once
			return err
		}
		return boom
	}})
	p := filepath.Join(e.dir, rule)
	e.write(p, "keep")
	if err := e.host.Load(e.ctx(), p); !errors.Is(err, boom) {
		t.Fatalf("load error = %v, want %v", err, boom)
	}
	if got := e.storedTimers(rule, names...); !maps.Equal(got, before) {
		t.Errorf("stored after the failed load = %q, want as before it %q", got, before)
	}
	if got := e.indexed(rule); !slices.Equal(got, wantIndex) {
		t.Errorf("index after the failed load = %q, want %q", got, wantIndex)
	}
	if n := e.host.timers.Pending(); n != 0 {
		t.Errorf("%d timers scheduled after the failed load", n)
	}

	// A version that loads gets the earlier timers (junk is skipped: it
	// does not decode).
	e.rt.register("keep", goRule{})
	e.reload(p, "keep")
	if s := e.status("keep"); s.Timers != 3 {
		t.Fatalf("timers armed once the rule loads = %d, want 3 (kept, rearmed, cancelled)", s.Timers)
	}
	if n := e.host.timers.Pending(); n != 3 {
		t.Errorf("%d timers scheduled once the rule loads, want 3", n)
	}
	if got := e.storedTimers(rule, names...); !maps.Equal(got, before) {
		t.Errorf("stored after the rule loaded = %q, want %q", got, before)
	}
}

// TestTimerCallAfterUndoRefused: a start the host gave up on may still
// call timer or cancel once its failed load was undone (the binding's
// check that its version was stopped can pass just before the undo); the
// call is refused (UNAVAILABLE) and writes nothing.
func TestTimerCallAfterUndoRefused(t *testing.T) {
	e := newEnv(t)
	const rule = "late.gorule"
	r := newRule(&e.host.services, filepath.Join(e.dir, rule), "gorule", e.host.defaults)
	t.Cleanup(r.cancel)
	version := newInstance([32]byte{})
	if err := r.timers.arm(e.ctx(), version, "a", time.Hour, 0, nil, 10); err != nil {
		t.Fatal(err)
	}
	r.timers.undo(e.ctx())
	if got := e.storedTimers(rule, "a"); len(got) != 0 {
		t.Fatalf("stored after the undo: %q", got)
	}
	err := r.timers.arm(e.ctx(), version, "b", time.Hour, 0, nil, 10)
	if abi.StatusOf(err) != abi.StatusUnavailable {
		t.Errorf("arm after the undo: %v, want UNAVAILABLE", err)
	}
	if got := e.storedTimers(rule, "b"); len(got) != 0 {
		t.Errorf("stored after an arm refused: %q", got)
	}
	if names := e.indexed(rule); len(names) != 0 {
		t.Errorf("index after an arm refused: %q", names)
	}
	if n := e.host.timers.Pending(); n != 0 {
		t.Errorf("%d timers scheduled", n)
	}
}

// TestDeletedFailedRuleDropsTimers: the file of a rule whose load failed
// is deleted; the timers an earlier run armed are deleted from the store
// (records and index), as a running rule's are, so that a rule of that
// name added later does not find them (they failed to be dropped before:
// they stayed in the store and the new rule fired them).
func TestDeletedFailedRuleDropsTimers(t *testing.T) {
	b := brokertest.Start(t)
	const rule = "gone.gorule"
	names := []string{"a", "b"}
	first := newEnvAt(t, b.Addr())
	first.load("gone", goRule{init: func(ctx context.Context, h abi.Host) error {
		for _, n := range names {
			if err := h.Timer(ctx, n, time.Hour, abi.TimerOptions{}); err != nil {
				return err
			}
		}
		return nil
	}})
	if err := first.host.Close(first.ctx()); err != nil {
		t.Fatal(err)
	}
	if got := first.storedTimers(rule, names...); len(got) != 2 {
		t.Fatalf("stored before the restart: %q", got)
	}

	e := newEnvAt(t, b.Addr())
	boom := errors.New("boom")
	e.rt.register("gone", goRule{init: func(context.Context, abi.Host) error { return boom }})
	p := filepath.Join(e.dir, rule)
	e.write(p, "gone")
	if err := e.host.Load(e.ctx(), p); !errors.Is(err, boom) {
		t.Fatalf("load error = %v, want %v", err, boom)
	}
	if got := e.storedTimers(rule, names...); len(got) != 2 {
		t.Fatalf("stored after the failed load: %q, want both kept", got)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	e.host.reconcile(e.ctx(), p)
	if st := e.host.Status(); len(st) != 0 {
		t.Fatalf("status after the file was deleted = %+v, want nothing", st)
	}
	if got := e.storedTimers(rule, names...); len(got) != 0 {
		t.Errorf("stored after the file was deleted: %q, want none", got)
	}
	if got := e.indexed(rule); len(got) != 0 {
		t.Errorf("index after the file was deleted: %q, want none", got)
	}

	// A rule of that name added later starts with no timer.
	e.rt.register("gone", goRule{})
	e.reload(p, "gone")
	if s := e.status("gone"); s.Timers != 0 {
		t.Errorf("timers of the new rule = %d, want 0", s.Timers)
	}
}
