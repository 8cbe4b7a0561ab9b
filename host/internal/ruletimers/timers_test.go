package ruletimers

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

const rule = "r.gorule"

// newTimers returns the timers of rule over st, with a mailbox of limit
// events, fenced by fence (nil: no group).
func newTimers(t *testing.T, st *memStore, limit int, fence func(rule, verb, key string) (hlc.HLC, error)) (*Timers, *Services, *mailbox.Box) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	svc := &Services{Ctx: ctx, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: clock.Real{},
		Store: st, Scheduler: timers.NewScheduler(stillClock{}, nil), Fence: fence}
	box := mailbox.New(limit, 0, nil, nil)
	return New(svc, rule, box), svc, box
}

// armed returns the armed timer name of rt.
func armed(rt *Timers, name string) *timers.Timer {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.idx[timers.TimerShard(name)][name]
}

// indexed returns the names the store's index of rule lists, sorted.
func indexed(t *testing.T, st *memStore) []string {
	t.Helper()
	kv := st.snapshot()
	dir, ok := kv[timers.TimerDirKey(rule)]
	if !ok {
		return nil
	}
	d, err := timers.DecodeTimerDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for shard := range timers.TimerShards {
		if !d.Has(shard) {
			continue
		}
		names, err := timers.DecodeTimerShard(kv[timers.TimerShardKey(rule, shard)])
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, names...)
	}
	slices.Sort(out)
	return out
}

// TestArmCancel: arm stores the timer's record and indexes its name before
// it returns, and holds it until its version is live; cancel deletes both,
// and a second cancel finds none.
func TestArmCancel(t *testing.T) {
	st := newMemStore()
	rt, svc, _ := newTimers(t, st, 10, nil)
	ctx := context.Background()
	v := &version{}
	if err := rt.Arm(ctx, v, "a", time.Second, time.Minute, []byte("p"), 10); err != nil {
		t.Fatal(err)
	}
	rec, ok := st.snapshot()[timers.TimerKey(rule, "a")]
	if !ok {
		t.Fatal("no record stored")
	}
	deadline, every, payload, err := timers.DecodeTimerRecord(rec)
	if err != nil || deadline != t0+1000 || every != 60_000 || string(payload) != "p" {
		t.Errorf("record = %d, %d, %q, %v; want %d, 60000, p", deadline, every, payload, err, t0+1000)
	}
	if got := indexed(t, st); !slices.Equal(got, []string{"a"}) {
		t.Errorf("indexed %q, want [a]", got)
	}
	if n := svc.Scheduler.Pending(); n != 0 {
		t.Errorf("%d scheduled before its version is live, want 0", n)
	}
	if info := rt.Info(); len(info) != 1 || !info[0].Due.IsZero() || info[0].Every != time.Minute || info[0].PayloadSize != 1 {
		t.Errorf("info while held = %+v", info)
	}
	rt.GoLive(v)
	if n := svc.Scheduler.Pending(); n != 1 {
		t.Errorf("%d scheduled once its version is live, want 1", n)
	}
	if info := rt.Info(); len(info) != 1 || !info[0].Due.Equal(time.UnixMilli(t0+1000)) {
		t.Errorf("info once live = %+v", info)
	}
	if got := rt.Names(); !slices.Equal(got, []string{"a"}) || rt.Count() != 1 {
		t.Errorf("names %q, count %d", got, rt.Count())
	}
	if err := rt.Cancel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if kv := st.snapshot(); len(kv) != 0 {
		t.Errorf("stored after cancel: %q", slices.Sorted(maps.Keys(kv)))
	}
	if n := svc.Scheduler.Pending(); n != 0 || rt.Count() != 0 {
		t.Errorf("%d scheduled, %d armed after cancel", n, rt.Count())
	}
	if err := rt.Cancel(ctx, "a"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("second cancel: %v, want NOT_FOUND", err)
	}
}

// TestArmLimit: past the rule's limit a new timer is refused (QUOTA);
// re-arming one needs no room.
func TestArmLimit(t *testing.T) {
	rt, _, _ := newTimers(t, newMemStore(), 10, nil)
	ctx := context.Background()
	v := &version{}
	if err := rt.Arm(ctx, v, "a", time.Hour, 0, nil, 1); err != nil {
		t.Fatal(err)
	}
	if err := rt.Arm(ctx, v, "b", time.Hour, 0, nil, 1); abi.StatusOf(err) != abi.StatusQuota {
		t.Errorf("arm past the limit: %v, want QUOTA", err)
	}
	if err := rt.Arm(ctx, v, "a", 2*time.Hour, 0, nil, 1); err != nil {
		t.Errorf("re-arm at the limit: %v", err)
	}
}

// TestHeldForItsVersion: a timer armed by a version that is starting is
// held while another one is live, and scheduled once it is.
func TestHeldForItsVersion(t *testing.T) {
	rt, svc, _ := newTimers(t, newMemStore(), 10, nil)
	ctx := context.Background()
	v1, v2 := &version{}, &version{}
	rt.GoLive(v1)
	if err := rt.Arm(ctx, v2, "new", time.Hour, 0, nil, 10); err != nil {
		t.Fatal(err)
	}
	if n := svc.Scheduler.Pending(); n != 0 {
		t.Errorf("%d scheduled while the version that armed it starts, want 0", n)
	}
	if err := rt.Arm(ctx, v1, "old", time.Hour, 0, nil, 10); err != nil {
		t.Fatal(err)
	}
	if n := svc.Scheduler.Pending(); n != 1 {
		t.Errorf("%d scheduled, want the live version's 1", n)
	}
	rt.GoLive(v2)
	if n := svc.Scheduler.Pending(); n != 2 {
		t.Errorf("%d scheduled once the new version is live, want 2", n)
	}
}

// TestLoadFireFired: timers are loaded from the store (one past its
// deadline is late), fired into the mailbox, taken, and their firing
// recorded: a one-shot timer is deleted, a periodic one moved a period on.
func TestLoadFireFired(t *testing.T) {
	st := newMemStore()
	ctx := context.Background()
	before, _, _ := newTimers(t, st, 10, nil)
	if err := before.Arm(ctx, &version{}, "once", -5*time.Millisecond, 0, []byte("x"), 10); err != nil {
		t.Fatal(err)
	}
	if err := before.Arm(ctx, &version{}, "tick", time.Second, time.Second, nil, 10); err != nil {
		t.Fatal(err)
	}
	rt, svc, box := newTimers(t, st, 10, nil)
	if err := rt.Load(ctx); err != nil {
		t.Fatal(err)
	}
	if n := rt.Count(); n != 2 {
		t.Fatalf("%d loaded, want 2", n)
	}
	rt.GoLive(&version{})
	if n := svc.Scheduler.Pending(); n != 2 {
		t.Errorf("%d scheduled, want 2", n)
	}
	once := armed(rt, "once")
	rt.Fire(once, t0)
	d, ok := box.Pop()
	if !ok || d.Timer != once || d.Ev.Op != abi.OpTimer || d.Ev.Key != "once" || !bytes.Equal(d.Ev.Value, []byte("x")) {
		t.Fatalf("mailbox: %+v, %v", d, ok)
	}
	if !rt.Take(once, &d.Ev) || !d.Ev.Late {
		t.Errorf("take: late %v, want a late event", d.Ev.Late)
	}
	rt.Fired(once)
	if _, ok := st.snapshot()[timers.TimerKey(rule, "once")]; ok {
		t.Error("a fired one-shot timer's record stays")
	}
	if got := indexed(t, st); !slices.Equal(got, []string{"tick"}) {
		t.Errorf("indexed %q, want [tick]", got)
	}
	tick := armed(rt, "tick")
	rt.Fire(tick, t0)
	d, _ = box.Pop()
	if !rt.Take(tick, &d.Ev) || d.Ev.Late {
		t.Errorf("take: late %v, want on time", d.Ev.Late)
	}
	rt.Fired(tick)
	deadline, _, _, err := timers.DecodeTimerRecord(st.snapshot()[timers.TimerKey(rule, "tick")])
	if err != nil || deadline != t0+2000 {
		t.Errorf("periodic record's deadline %d (%v), want %d", deadline, err, t0+2000)
	}
}

// TestFullMailboxWaits: a timer due while the mailbox is full waits, and
// Refill queues it once there is room: it is never dropped.
func TestFullMailboxWaits(t *testing.T) {
	rt, _, box := newTimers(t, newMemStore(), 1, nil)
	rt.GoLive(&version{})
	if err := rt.Arm(context.Background(), nil, "a", 0, 0, nil, 10); err != nil {
		t.Fatal(err)
	}
	box.Push(mailbox.Delivery{Ev: abi.Event{Op: abi.OpSet, Key: "k"}})
	a := armed(rt, "a")
	rt.Fire(a, t0)
	rt.Refill() // still no room
	if n := box.Len(); n != 1 {
		t.Fatalf("%d in the mailbox, want 1", n)
	}
	if d, _ := box.Pop(); d.Timer != nil {
		t.Fatal("the timer's event was queued in a full mailbox")
	}
	rt.Refill()
	if d, ok := box.Pop(); !ok || d.Timer != a {
		t.Errorf("after refill: %+v, %v; want the timer's event", d, ok)
	}
}

// TestFencedWrites: in a group every write of a timer key carries the
// rule's token; a write refused for the fence (this host lost the rule, or
// the store holds a later owner's token) is not retried.
func TestFencedWrites(t *testing.T) {
	st := newMemStore()
	token := hlc.HLC{Wall: t0, Node: "owner"}
	var lost bool
	fence := func(r, verb, key string) (hlc.HLC, error) {
		if r != rule {
			t.Errorf("fence of rule %q", r)
		}
		if lost {
			return hlc.HLC{}, abi.Errorf(abi.StatusLockLost, "%s %s: not owned", verb, key)
		}
		return token, nil
	}
	rt, _, _ := newTimers(t, st, 10, fence)
	ctx := context.Background()
	rt.GoLive(&version{})
	if err := rt.Arm(ctx, nil, "p", time.Second, time.Second, nil, 10); err != nil {
		t.Fatal(err)
	}
	if err := rt.Arm(ctx, nil, "q", time.Second, 0, nil, 10); err != nil {
		t.Fatal(err)
	}
	for i, tok := range st.tokens {
		if tok != token {
			t.Errorf("write %d carried %v, want %v", i, tok, token)
		}
	}
	// The store refuses for a later owner's token: tried once.
	st.fail = protocol.ErrFencingTokenLowerVersion
	p := armed(rt, "p")
	rt.Fire(p, t0)
	n := st.writes()
	rt.Fired(p)
	if got := st.writes() - n; got != 1 {
		t.Errorf("%d writes tried for a firing the store refused for its fence, want 1", got)
	}
	// This host lost the rule: nothing is sent.
	st.fail = nil
	lost = true
	q := armed(rt, "q")
	rt.Fire(q, t0)
	n = st.writes()
	rt.Fired(q)
	if got := st.writes() - n; got != 0 {
		t.Errorf("%d writes sent for a rule this host lost, want 0", got)
	}
	if _, ok := st.snapshot()[timers.TimerKey(rule, "q")]; !ok {
		t.Error("the record of a rule this host lost was deleted")
	}
	if !fenceRefused(abi.Errorf(abi.StatusLockLost, "lost")) || !fenceRefused(protocol.ErrFencingTokenLowerVersion) || fenceRefused(errors.New("timeout")) {
		t.Error("fenceRefused misclassifies")
	}
}

// TestUndoFirstLoad: a failed first load's timer calls are undone: a timer
// it re-armed gets its earlier record back, one it armed anew is deleted
// with its index entry, one it cancelled comes back; later calls are
// refused (UNAVAILABLE).
func TestUndoFirstLoad(t *testing.T) {
	st := newMemStore()
	ctx := context.Background()
	earlier, _, _ := newTimers(t, st, 10, nil)
	for _, name := range []string{"kept", "rearmed", "cancelled"} {
		if err := earlier.Arm(ctx, nil, name, time.Hour, 0, []byte(name), 10); err != nil {
			t.Fatal(err)
		}
	}
	was := st.snapshot()
	rt, svc, _ := newTimers(t, st, 10, nil)
	v := &version{}
	if err := rt.Arm(ctx, v, "rearmed", time.Minute, time.Minute, []byte("new"), 10); err != nil {
		t.Fatal(err)
	}
	if err := rt.Arm(ctx, v, "fresh", time.Minute, 0, nil, 10); err != nil {
		t.Fatal(err)
	}
	if err := rt.Cancel(ctx, "cancelled"); err != nil {
		t.Fatal(err)
	}
	rt.Stop()
	rt.Undo(ctx)
	if got := st.snapshot(); !maps.EqualFunc(got, was, bytes.Equal) {
		t.Errorf("stored after the undo: %q, want %q", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(was)))
	}
	if err := rt.Arm(ctx, v, "late", time.Minute, 0, nil, 10); abi.StatusOf(err) != abi.StatusUnavailable {
		t.Errorf("arm after the undo: %v, want UNAVAILABLE", err)
	}
	if n := svc.Scheduler.Pending(); n != 0 {
		t.Errorf("%d scheduled", n)
	}
}

// TestDrop: a deleted rule's timers are deleted from the store, records
// and index.
func TestDrop(t *testing.T) {
	st := newMemStore()
	ctx := context.Background()
	rt, _, _ := newTimers(t, st, 10, nil)
	for _, name := range []string{"a", "b", "c"} {
		if err := rt.Arm(ctx, nil, name, time.Hour, 0, nil, 10); err != nil {
			t.Fatal(err)
		}
	}
	gone, _, _ := newTimers(t, st, 10, nil)
	gone.Drop(ctx)
	if kv := st.snapshot(); len(kv) != 0 {
		t.Errorf("stored after drop: %q", slices.Sorted(maps.Keys(kv)))
	}
}
