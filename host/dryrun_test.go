package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/protocol"
)

// stagedLog collects a dry run's reported writes.
type stagedLog struct {
	mu sync.Mutex
	ws []staging.Write
}

func (l *stagedLog) add(w staging.Write) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ws = append(l.ws, w)
}

func (l *stagedLog) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]string, len(l.ws))
	for i, w := range l.ws {
		out[i] = w.String()
	}
	return out
}

// watchKeys registers a fresh client for KEYNOTIFY on keys.
func watchKeys(t *testing.T, e *env, keys ...string) *protocol.Client {
	t.Helper()
	w := newClient(t, e.addr)
	for _, k := range keys {
		if err := w.KeyNotify(e.ctx(), []byte(k), protocol.CallOptions{}); err != nil {
			t.Fatalf("keynotify %s: %v", k, err)
		}
	}
	return w
}

// notifiedBefore writes sentinel (which w watches) and returns the keys w
// was notified of before it: all the writes that reached the store before
// the sentinel did.
func notifiedBefore(t *testing.T, e *env, w *protocol.Client, sentinel string) []string {
	t.Helper()
	e.set(sentinel, "end")
	var got []string
	deadline := time.After(30 * time.Second)
	for {
		select {
		case ev := <-w.Events():
			if ev.Kind != protocol.EventNotify {
				continue
			}
			if string(ev.Key) == sentinel {
				return got
			}
			got = append(got, fmt.Sprintf("%s %s=%q", ev.Op, ev.Key, ev.Value))
		case <-deadline:
			t.Fatalf("no notification of the sentinel %s; before it: %v", sentinel, got)
			return nil
		}
	}
}

// A dry run handles live notifications but changes no key: a client
// watching every key the rules write is notified of nothing, the values
// stay as they were, and every intended write is reported with its event.
// Reads see the staged writes (the rule's own, and other rules'); staged
// writes notify no rule; locks and timers are simulated in memory.
func TestDryRunChangesNothing(t *testing.T) {
	var staged stagedLog
	e := newEnv(t, func(c *Config) { c.DryRun = staged.add })
	e.set("old", "x")
	e.set("busy", "someone else")
	written := []string{"target", "count", "old", "lk", "fenced", "fromTimer", "busy", "seen"}
	watcher := watchKeys(t, e, append(written, "sentinel")...)

	var chained atomic.Int64
	e.load("chained", goRule{ // watches what thermo writes: never notified
		init:   watchInit("target"),
		handle: func(context.Context, abi.Host, abi.Event) error { chained.Add(1); return nil },
	})
	e.load("other", goRule{ // sees thermo's staged writes
		init: watchInit("check"),
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if v, err := h.Get(ctx, "count"); err == nil && string(v.Data) == "2" {
				_, err := h.Set(ctx, "seen", v.Data, abi.SetOptions{})
				return err
			}
			return nil
		},
	})
	e.load("thermo", goRule{
		init: watchInit("setPoint"),
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if ev.Op == abi.OpTimer {
				_, err := h.Set(ctx, "fromTimer", ev.Value, abi.SetOptions{})
				return err
			}
			n := 0
			if v, err := h.Get(ctx, "count"); err == nil { // the staged count from the last event
				n = int(v.Data[0] - '0')
			} else if abi.StatusOf(err) != abi.StatusNotFound {
				return err
			}
			if _, err := h.Set(ctx, "count", []byte{byte('0' + n + 1)}, abi.SetOptions{}); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			if _, err := h.Set(ctx, "target", []byte("28"), abi.SetOptions{TTL: time.Hour}); err != nil {
				return err
			}
			if v, err := h.Get(ctx, "target"); err != nil || string(v.Data) != "28" {
				return fmt.Errorf("get target after set: %q, %v", v.Data, err)
			}
			if _, err := h.Set(ctx, "target", []byte("29"), abi.SetOptions{Cond: abi.CondNX}); abi.StatusOf(err) != abi.StatusNotApplied {
				return fmt.Errorf("set NX of a staged key: %v, want NOT_APPLIED", err)
			}
			if err := h.Del(ctx, "old", abi.DelOptions{}); err != nil {
				return err
			}
			if _, err := h.Get(ctx, "old"); abi.StatusOf(err) != abi.StatusNotFound {
				return fmt.Errorf("get of a staged delete: %v, want NOT_FOUND", err)
			}
			if _, err := h.Lock(ctx, "busy", time.Second, abi.LockOptions{}); abi.StatusOf(err) != abi.StatusBusy {
				return fmt.Errorf("lock held in the store: %v, want BUSY", err)
			}
			if _, err := h.Lock(ctx, "lk", time.Second, abi.LockOptions{}); err != nil {
				return err
			}
			if _, err := h.Set(ctx, "fenced", []byte("on"), abi.SetOptions{Fence: "lk"}); err != nil {
				return err
			}
			if err := h.Unlock(ctx, "lk"); err != nil {
				return err
			}
			if _, err := h.Set(ctx, "fenced", []byte("off"), abi.SetOptions{Fence: "lk"}); abi.StatusOf(err) != abi.StatusLockLost {
				return fmt.Errorf("fenced write after unlock: %v, want LOCK_LOST", err)
			}
			return h.Timer(ctx, "t", 0, abi.TimerOptions{Payload: []byte("fired")})
		},
	})

	calls := func(name string) uint64 { s := e.status(name); return s.Handled + s.Failed }
	v1 := e.set("setPoint", "30")
	waitFor(t, "the event and the timer handled", func() bool { return calls("thermo") == 2 })
	e.set("setPoint", "31")
	waitFor(t, "the second event handled", func() bool { return calls("thermo") == 3 })
	e.set("check", "1")
	waitFor(t, "the other rule ran", func() bool { return calls("other") == 1 })

	if got := notifiedBefore(t, e, watcher, "sentinel"); len(got) != 0 {
		t.Errorf("a dry run changed the store: %v", got)
	}
	for _, name := range []string{"thermo", "other"} {
		if s := e.status(name); s.Failed != 0 {
			t.Errorf("%s failed: %s", name, s.LastError)
		}
	}
	for _, k := range written {
		v, found := e.get(k)
		want, wantFound := map[string]string{"old": "x", "busy": "someone else"}[k]
		if found != wantFound || v != want {
			t.Errorf("%s = %q (found %v) after the dry run, want %q (found %v)", k, v, found, want, wantFound)
		}
	}
	if _, found := e.get(timers.TimerKey("thermo.gorule", "t")); found {
		t.Error("a dry run's timer was kept in the store")
	}
	if n := chained.Load(); n != 0 {
		t.Errorf("a staged write notified a rule %d times", n)
	}

	lines := staged.lines()
	for _, want := range []string{
		`dry-run: SET count "1" (rule thermo.gorule, event SET setPoint v=` + v1 + `)`,
		`dry-run: SET target "28" PX 1h0m0s (rule thermo.gorule, event SET setPoint v=` + v1 + `)`,
		`dry-run: SET target "29" NX (rule thermo.gorule, event SET setPoint v=` + v1 + `): not staged: set "target": condition not met`,
		`dry-run: DEL old (rule thermo.gorule`,
		`dry-run: LOCK busy PX 1s (rule thermo.gorule, event SET setPoint v=` + v1 + `): not staged: lock "busy": held by another holder`,
		`dry-run: LOCK lk PX 1s (rule thermo.gorule`,
		`dry-run: SET fenced "on" fenced by "lk" (rule thermo.gorule`,
		`dry-run: UNLOCK lk (rule thermo.gorule`,
		`dry-run: SET fenced "off" fenced by "lk" (rule thermo.gorule`,
		`dry-run: SET fromTimer "fired" (rule thermo.gorule, event TIMER t)`,
		`dry-run: SET count "2" (rule thermo.gorule, event SET setPoint`,
		`dry-run: SET seen "2" (rule other.gorule, event SET check`,
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("no reported write starts with %s; reported:\n%s", want, strings.Join(lines, "\n"))
		}
	}
}

// A dry run's reads of keys it has not staged reach the store; a store
// error is the rule's, as in a real run.
func TestDryRunReadsTheStoreBehindTheOverlay(t *testing.T) {
	var staged stagedLog
	e := newEnv(t, func(c *Config) { c.DryRun = staged.add })
	e.set("limit", "25")
	got := make(chan string, 1)
	e.load("reader", goRule{
		init: watchInit("in"),
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			v, err := h.Get(ctx, "limit")
			if err != nil {
				return err
			}
			if err := h.VDel(ctx, "limit", []byte("26"), abi.DelOptions{}); abi.StatusOf(err) != abi.StatusNotApplied {
				return errors.Join(errors.New("vdel of another value was not NOT_APPLIED"), err)
			}
			got <- string(v.Data)
			return nil
		},
	})
	e.set("in", "1")
	select {
	case v := <-got:
		if v != "25" {
			t.Fatalf("get limit = %q, want the store's 25", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("rule did not run: %+v", e.status("reader"))
	}
	waitFor(t, "handled", func() bool { return e.status("reader").Handled == 1 })
	if s := e.status("reader"); s.Failed != 0 {
		t.Fatalf("reader failed: %s", s.LastError)
	}
}

// A dry run stages its writes on the store's own semantics: a key is copied
// from the store, value and version, before the first write of it (SET NX
// of a stored key is not applied and returns the store's version); a key
// the dry run only reads stays live while one it wrote keeps the staged
// value; a key written fenced refuses an unfenced write, as the store
// would, and the refusal is reported.
func TestDryRunStagesOnTheStoresSemantics(t *testing.T) {
	var staged stagedLog
	e := newEnv(t, func(c *Config) { c.DryRun = staged.add })
	stored := e.set("stored", "x")
	e.set("live", "1")
	type seen struct{ nx, nxVersion, live, mine, fenced string }
	got := make(chan seen, 2)
	e.load("sem", goRule{
		init: watchInit("in"),
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			var s seen
			if string(ev.Value) == "1" {
				var err error
				s.nxVersion, err = h.Set(ctx, "stored", []byte("y"), abi.SetOptions{Cond: abi.CondNX})
				s.nx = abi.StatusOf(err).String()
				if _, err := h.Set(ctx, "mine", []byte("staged"), abi.SetOptions{}); err != nil {
					return err
				}
				if _, err := h.Lock(ctx, "lk", time.Second, abi.LockOptions{}); err != nil {
					return err
				}
				if _, err := h.Set(ctx, "f", []byte("1"), abi.SetOptions{Fence: "lk"}); err != nil {
					return err
				}
				_, err = h.Set(ctx, "f", []byte("2"), abi.SetOptions{})
				s.fenced = abi.StatusOf(err).String()
			}
			for key, into := range map[string]*string{"live": &s.live, "mine": &s.mine} {
				v, err := h.Get(ctx, key)
				if err != nil {
					return err
				}
				*into = string(v.Data)
			}
			got <- s
			return nil
		},
	})
	next := func() seen {
		t.Helper()
		select {
		case s := <-got:
			return s
		case <-time.After(30 * time.Second):
			t.Fatalf("rule did not run: %+v", e.status("sem"))
			return seen{}
		}
	}
	e.set("in", "1")
	first := next()
	if first.nx != abi.StatusNotApplied.String() || first.nxVersion != stored {
		t.Errorf("SET NX of a stored key: %s version %s, want %s and the store's version %s", first.nx, first.nxVersion, abi.StatusNotApplied, stored)
	}
	if first.fenced != abi.StatusFenced.String() {
		t.Errorf("unfenced SET of a key written fenced: %s, want %s", first.fenced, abi.StatusFenced)
	}
	if first.live != "1" || first.mine != "staged" {
		t.Errorf("first event read live=%q mine=%q, want 1 and staged", first.live, first.mine)
	}
	e.set("live", "2")
	e.set("mine", "from outside")
	e.set("in", "2")
	if second := next(); second.live != "2" || second.mine != "staged" {
		t.Errorf("second event read live=%q mine=%q, want the store's 2 and the staged value", second.live, second.mine)
	}
	lines := staged.lines()
	want := `dry-run: SET f "2" (rule sem.gorule, event SET in v=`
	if !slices.ContainsFunc(lines, func(l string) bool {
		return strings.HasPrefix(l, want) && strings.Contains(l, "not staged: ") && strings.Contains(l, "fencing token")
	}) {
		t.Errorf("no refused write starts with %s and names the fencing token; reported:\n%s", want, strings.Join(lines, "\n"))
	}
	if v, _ := e.get("mine"); v != "from outside" {
		t.Errorf("mine = %q in the store, want the outside write's", v)
	}
}
