package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// liveTasks returns what the host's call tracker still counts as running
// (workers, compiles, starts, closes).
func liveTasks(h *Host) []string {
	h.calls.mu.Lock()
	defer h.calls.mu.Unlock()
	var out []string
	for k := range h.calls.live {
		out = append(out, k.what)
	}
	return out
}

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
			if err := os.WriteFile(p, []byte("lf"), 0o644); err != nil {
				t.Fatal(err)
			}
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
			if n := e.host.reg.watchedKeys(); n != 0 {
				t.Errorf("%d watched keys registered after the failed load", n)
			}
			if n := e.host.timers.pending(); n != 0 {
				t.Errorf("%d timers scheduled after the failed load", n)
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
