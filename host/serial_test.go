package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/inproc"
	"github.com/ssrun/ssrun/inproc/inproctest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/store"
)

// serialEnv is a serial host on a store in the same process, all on a
// virtual clock: e.user writes from outside. seed, if given, fills the
// store first.
func newSerialEnv(t *testing.T, seed ...func(*store.Store)) (*env, *clock.Virtual) {
	t.Helper()
	vc := clock.NewVirtual(time.UnixMilli(t0))
	st := store.New(vc.Now, store.Quota{Keys: -1, Bytes: -1})
	for _, f := range seed {
		f(st)
	}
	srv := inproc.New(st)
	dial := func(id string) *protocol.Client { return inproctest.Client(t, srv, id, vc.Now) }
	e := &env{t: t, rt: &goRuntime{}, dir: t.TempDir(), logs: &testutil.Buffer{}, client: dial("serial-host"), user: dial("serial-user")}
	e.startHost(func(o *Config) { o.Clock, o.Serial = vc, true })
	return e, vc
}

// idle waits until the serial host is idle.
func (e *env) idle() {
	e.t.Helper()
	if err := e.host.WaitIdle(e.ctx()); err != nil {
		e.t.Fatalf("WaitIdle: %v", err)
	}
}

// handled is what the rules of a test did, in order.
type handled struct {
	mu    sync.Mutex
	lines []string
}

func (j *handled) add(format string, args ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.lines = append(j.lines, fmt.Sprintf(format, args...))
}

func (j *handled) take() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	out := slices.Clone(j.lines)
	j.lines = j.lines[:0]
	return out
}

// In a serial host the handlers run one at a time, in the order their
// events were queued across the rules (the rules watching one key in name
// order), and WaitIdle returns once the chain of writes they cause is
// over: the same in every run.
func TestSerialHostOrderAndIdle(t *testing.T) {
	e, _ := newSerialEnv(t)
	var j handled
	var running sync.Mutex
	relay := func(name, out string) goRule {
		return goRule{
			init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "in", abi.WatchOptions{}) },
			handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
				if !running.TryLock() {
					t.Errorf("%s runs while another handler runs", name)
					return nil
				}
				defer running.Unlock()
				j.add("%s %s", name, ev.Value)
				if out == "" {
					return nil
				}
				_, err := h.Set(ctx, out, ev.Value, abi.SetOptions{})
				return err
			},
		}
	}
	// b writes "in2", which c watches; a and b both watch "in".
	e.load("b", relay("b", "mid"))
	e.load("a", relay("a", ""))
	e.load("c", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "mid", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			j.add("c %s", ev.Value)
			_, err := h.Set(ctx, "out", ev.Value, abi.SetOptions{})
			return err
		},
	})
	e.idle()
	want := []string{"a 1", "b 1", "a 2", "b 2", "c 1", "c 2"}
	for round := range 20 {
		release, err := e.host.Hold(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		e.set("in", "1")
		e.set("in", "2")
		release()
		e.idle()
		if got := j.take(); !slices.Equal(got, want) {
			t.Fatalf("round %d: handled %q, want %q", round, got, want)
		}
		if v, _ := e.get("out"); v != "2" {
			t.Fatalf("round %d: out = %q once idle, want 2", round, v)
		}
		e.set("out", "reset")
		e.idle()
	}
}

// A handler waiting for a lock lets the serial host be idle and the other
// rules run; it waits on the host's clock, and takes the lock when its
// holder lets go, or is BUSY once the wait has passed on the clock.
func TestSerialLockWaitOnTheClock(t *testing.T) {
	e, clock := newSerialEnv(t)
	var j handled
	e.load("waiter", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "take", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			began := h.Now()
			_, err := h.Lock(ctx, "L", 10*time.Second, abi.LockOptions{Wait: 5 * time.Second})
			j.add("%s after %dms", abi.StatusOf(err), h.Now()-began)
			if err == nil {
				return h.Unlock(ctx, "L")
			}
			return nil
		},
	})
	e.load("other", goRule{
		init:   func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "ping", abi.WatchOptions{}) },
		handle: func(context.Context, abi.Host, abi.Event) error { j.add("pong"); return nil },
	})
	e.idle()
	advance := func(d time.Duration) {
		target := clock.Now().Add(d)
		for {
			e.idle()
			at, ok := clock.Next()
			if !ok || at.After(target) {
				break
			}
			clock.Set(at)
			for clock.Fire() {
				e.idle()
			}
		}
		clock.Set(target)
		e.idle()
	}

	e.set("L", "someone else")
	e.set("take", "1")
	e.idle() // parked: idle
	e.set("ping", "1")
	e.idle()
	if got := j.take(); !slices.Equal(got, []string{"pong"}) {
		t.Fatalf("while the waiter waits: %q, want the other rule's pong only", got)
	}
	advance(2 * time.Second)
	e.del("L")
	e.idle()
	if got := j.take(); !slices.Equal(got, []string{"OK after 2000ms"}) {
		t.Fatalf("freed after 2 s: %q", got)
	}

	e.set("L", "someone else")
	e.set("take", "2")
	advance(time.Minute)
	if got := j.take(); !slices.Equal(got, []string{"BUSY after 5000ms"}) {
		t.Fatalf("never freed: %q, want BUSY exactly when the wait passed", got)
	}
}

// Timers and lease renewals of a serial host run on its clock: nothing
// fires until the clock is moved, and each is handled before WaitIdle
// returns.
func TestSerialTimersAndRenewalsOnTheClock(t *testing.T) {
	e, clock := newSerialEnv(t)
	var j handled
	var token string
	e.load("r", goRule{
		init: func(ctx context.Context, h abi.Host) error {
			var err error
			if token, err = h.Lock(ctx, "lease", 3*time.Second, abi.LockOptions{}); err != nil {
				return err
			}
			return h.Timer(ctx, "t", 1500*time.Millisecond, abi.TimerOptions{})
		},
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			tok, err := h.Lock(ctx, "lease", 3*time.Second, abi.LockOptions{})
			j.add("%s %s at %dms, token renewed %v", ev.Op, ev.Key, h.Now()-t0, err == nil && tok != token)
			return err
		},
	})
	e.idle()
	if at, ok := clock.Next(); !ok || at.Sub(time.UnixMilli(t0)) != time.Second {
		t.Fatalf("next clock call at %v, want the renewal at t0+1s", at)
	}
	if got := j.take(); len(got) != 0 {
		t.Fatalf("before the clock moved: %q", got)
	}
	for clock.Now().Sub(time.UnixMilli(t0)) < 1500*time.Millisecond {
		at, _ := clock.Next()
		clock.Set(at)
		for clock.Fire() {
			e.idle()
		}
	}
	if got := j.take(); !slices.Equal(got, []string{"TIMER t at 1500ms, token renewed true"}) {
		t.Fatalf("after 1.5 s: %q", got)
	}
}

// A serial host needs a store client that counts its events.
func TestSerialNeedsCountedEvents(t *testing.T) {
	_, err := New(Config{Store: uncounted{}, Runtimes: []abi.Runtime{&goRuntime{}}, Serial: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err == nil || !strings.Contains(err.Error(), "EventsQueued") {
		t.Fatalf("New = %v, want a refusal naming EventsQueued", err)
	}
}

// uncounted is a Store that does not count its events.
type uncounted struct{ Store }

func (uncounted) MaxPacketSize() (int, bool) { return 0, false }

// del deletes key from outside.
func (e *env) del(key string) {
	e.t.Helper()
	if _, err := e.user.Del(e.ctx(), []byte(key), protocol.DelOptions{}); err != nil {
		e.t.Fatalf("del %s: %v", key, err)
	}
}
