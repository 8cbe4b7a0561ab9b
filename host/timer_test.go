package host

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// A timer is in the store (record and index) when timer returns, fires at
// its deadline on the host's clock and not before, carries its payload,
// and is deleted from the store once handled.
func TestTimerFiresAtDeadlineAndIsDeleted(t *testing.T) {
	e, clock := newTimerEnv(t)
	tr := e.loadTimerRule("door")
	tr.arm(t, "door", 1500*time.Millisecond, abi.TimerOptions{Payload: []byte("open-too-long")})
	if d, every, p, ok := e.record(tr.name, "door"); !ok || d != t0+1500 || every != 0 || p != "open-too-long" {
		t.Fatalf("record = %d, %d, %q, found %v; want deadline t0+1500, once, the payload", d, every, p, ok)
	}
	if got := e.indexed(tr.name); !slices.Equal(got, []string{"door"}) {
		t.Fatalf("index = %q", got)
	}
	if n := e.ruleStatus(tr.name).Timers; n != 1 {
		t.Fatalf("RuleStatus.Timers = %d, want 1", n)
	}
	clock.set(t0 + 1499)
	if early := tr.sync(t); len(early) != 0 {
		t.Fatalf("fired before its deadline: %+v", early[0].ev)
	}
	clock.set(t0 + 1500)
	f := tr.next(t)
	if f.ev.Op != abi.OpTimer || f.ev.Key != "door" || string(f.ev.Value) != "open-too-long" || f.ev.Deadline != t0+1500 || f.ev.Late || f.at != t0+1500 {
		t.Fatalf("event %+v at %d; want TIMER door, its payload, deadline t0+1500, on time", f.ev, f.at)
	}
	e.waitGone(tr.name, "door")
	if _, err := e.user.Get(e.ctx(), []byte(timers.TimerDirKey(tr.name)), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "no timer armed", func() bool { return e.ruleStatus(tr.name).Timers == 0 && e.host.Stats().Timers == 0 })
	if got := tr.sync(t); len(got) != 0 {
		t.Fatalf("fired again: %+v", got[0].ev)
	}
}

// Delay 0 fires at once; an empty payload comes back empty.
func TestTimerDelayZero(t *testing.T) {
	e, _ := newTimerEnv(t)
	tr := e.loadTimerRule("zero")
	tr.arm(t, "now", 0, abi.TimerOptions{})
	f := tr.next(t)
	if f.ev.Key != "now" || len(f.ev.Value) != 0 || f.ev.Deadline != t0 || f.ev.Late {
		t.Fatalf("event %+v; want now, empty, deadline t0, on time", f.ev)
	}
}

// cancel deletes the timer (store included); it does not fire; a second
// cancel is NOT_FOUND.
func TestTimerCancel(t *testing.T) {
	e, clock := newTimerEnv(t)
	tr := e.loadTimerRule("cancel")
	tr.arm(t, "c", time.Second, abi.TimerOptions{Payload: []byte("x")})
	ctx := e.ctx()
	if err := tr.h.Cancel(ctx, "c"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if _, _, _, ok := e.record(tr.name, "c"); ok || len(e.indexed(tr.name)) != 0 {
		t.Fatalf("cancelled timer still in the store (record %v, index %q)", ok, e.indexed(tr.name))
	}
	if err := tr.h.Cancel(ctx, "c"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Fatalf("second cancel: %v, want NOT_FOUND", err)
	}
	clock.set(t0 + 5000)
	if got := tr.sync(t); len(got) != 0 {
		t.Fatalf("cancelled timer fired: %+v", got[0].ev)
	}
}

// Re-arming replaces (debounce): armed at t0 for 1 s, re-armed at t0+500
// for 1 s, it fires once, at t0+1500.
func TestTimerRearmDebounces(t *testing.T) {
	e, clock := newTimerEnv(t)
	tr := e.loadTimerRule("debounce")
	tr.arm(t, "d", time.Second, abi.TimerOptions{Payload: []byte("first")})
	clock.set(t0 + 500)
	tr.arm(t, "d", time.Second, abi.TimerOptions{Payload: []byte("second")})
	if d, _, p, _ := e.record(tr.name, "d"); d != t0+1500 || p != "second" {
		t.Fatalf("record after re-arm: deadline %d, payload %q", d-t0, p)
	}
	clock.set(t0 + 1000)
	if got := tr.sync(t); len(got) != 0 {
		t.Fatalf("the replaced deadline fired: %+v", got[0].ev)
	}
	clock.set(t0 + 1500)
	if f := tr.next(t); f.ev.Key != "d" || f.ev.Deadline != t0+1500 || string(f.ev.Value) != "second" {
		t.Fatalf("event %+v; want d at t0+1500 with the second payload", f.ev)
	}
	clock.set(t0 + 5000)
	if got := tr.sync(t); len(got) != 0 {
		t.Fatalf("fired twice: %+v", got[0].ev)
	}
	waitFor(t, "the one-shot timer disarmed after firing", func() bool { return e.ruleStatus(tr.name).Timers == 0 })
}

// A periodic timer fires at start + k*every for 100 periods (no drift),
// each period's deadline recorded in the store before the next; after the
// host misses periods it fires once, late, and goes on from the next
// period still ahead.
func TestTimerEveryNoDrift(t *testing.T) {
	e, clock := newTimerEnv(t)
	tr := e.loadTimerRule("tick")
	const every = 100
	tr.arm(t, "tick", every*time.Millisecond, abi.TimerOptions{Every: every * time.Millisecond, Payload: []byte("p")})
	for k := int64(1); k <= 100; k++ {
		clock.set(t0 + k*every)
		f := tr.next(t)
		if f.ev.Deadline != t0+k*every || f.ev.Late || string(f.ev.Value) != "p" {
			t.Fatalf("period %d: event %+v, want deadline t0+%d on time", k, f.ev, k*every)
		}
		waitFor(t, "next deadline recorded", func() bool {
			d, _, _, ok := e.record(tr.name, "tick")
			return ok && d == t0+(k+1)*every
		})
	}
	clock.set(t0 + 101*every + 350) // periods 101..104 pass while the rule is not called
	f := tr.next(t)
	if f.ev.Deadline != t0+101*every || !f.ev.Late {
		t.Fatalf("after missed periods: event %+v, want deadline t0+%d, late", f.ev, 101*every)
	}
	waitFor(t, "next period ahead recorded", func() bool {
		d, _, _, _ := e.record(tr.name, "tick")
		return d == t0+105*every
	})
	if got := tr.sync(t); len(got) != 0 {
		t.Fatalf("missed periods fired: %+v", got[0].ev)
	}
}

// A timer due while the rule is busy is delivered when the rule is free,
// late once the tolerance has passed; timers due while the mailbox is full
// wait for room instead of being dropped.
func TestTimerBusyRuleLateAndFullMailbox(t *testing.T) {
	e, clock := newTimerEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"busy.gorule": {Mailbox: 2, Timeout: time.Minute}}
	})
	tr := e.loadTimerRule("busy")
	tr.block = make(chan struct{})
	tr.arm(t, "first", 0, abi.TimerOptions{})
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		tr.arm(t, n, 10*time.Millisecond, abi.TimerOptions{})
	}
	clock.set(t0 + 10 + TimerLateTolerance.Milliseconds() + 1)
	waitFor(t, "due timers queued or waiting", func() bool { return e.host.timers.Pending() == 0 })
	close(tr.block)
	got := map[string]bool{}
	for range 6 {
		f := tr.next(t)
		if got[f.ev.Key] {
			t.Fatalf("%s fired twice", f.ev.Key)
		}
		got[f.ev.Key] = true
		if f.ev.Key != "first" && !f.ev.Late {
			t.Errorf("%s handled %d ms after its deadline, not marked late", f.ev.Key, f.at-f.ev.Deadline)
		}
	}
	if s := e.ruleStatus(tr.name); s.Dropped != 0 {
		t.Fatalf("dropped %d events", s.Dropped)
	}
	waitFor(t, "all fired timers deleted", func() bool { return len(e.indexed(tr.name)) == 0 })
}

// Arguments: INVALID, TOO_LARGE, QUOTA; re-arming at the quota works.
func TestTimerArgumentsAndLimits(t *testing.T) {
	e, _ := newTimerEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"limits.gorule": {MaxTimers: 2, MaxValueBytes: 8}}
	})
	tr := e.loadTimerRule("limits")
	ctx := e.ctx()
	for _, tc := range []struct {
		name   string
		delay  time.Duration
		opts   abi.TimerOptions
		status abi.Status
	}{
		{"", 0, abi.TimerOptions{}, abi.StatusInvalid},
		{strings.Repeat("n", MaxTimerName+1), 0, abi.TimerOptions{}, abi.StatusInvalid},
		{"neg", -time.Millisecond, abi.TimerOptions{}, abi.StatusInvalid},
		{"neg-every", time.Second, abi.TimerOptions{Every: -time.Second}, abi.StatusInvalid},
		{"sub-ms", time.Second, abi.TimerOptions{Every: 500 * time.Microsecond}, abi.StatusInvalid},
		{"big", time.Second, abi.TimerOptions{Payload: []byte("123456789")}, abi.StatusTooLarge},
	} {
		if err := tr.h.Timer(ctx, tc.name, tc.delay, tc.opts); abi.StatusOf(err) != tc.status {
			t.Errorf("timer %.20q %v %+v: %v, want %v", tc.name, tc.delay, tc.opts, err, tc.status)
		}
	}
	if err := tr.h.Cancel(ctx, ""); abi.StatusOf(err) != abi.StatusInvalid {
		t.Errorf("cancel of an empty name: %v, want INVALID", err)
	}
	tr.arm(t, strings.Repeat("n", MaxTimerName), time.Hour, abi.TimerOptions{Payload: []byte("12345678")})
	tr.arm(t, "b", time.Hour, abi.TimerOptions{})
	err := tr.h.Timer(ctx, "c", time.Hour, abi.TimerOptions{})
	if abi.StatusOf(err) != abi.StatusQuota || !strings.Contains(err.Error(), "max_timers") {
		t.Fatalf("third timer: %v, want QUOTA naming max_timers", err)
	}
	tr.arm(t, "b", 2*time.Hour, abi.TimerOptions{}) // re-arming needs no room
	if err := tr.h.Cancel(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	tr.arm(t, "c", time.Hour, abi.TimerOptions{})
	if got := e.indexed(tr.name); len(got) != 2 || e.ruleStatus(tr.name).Timers != 2 {
		t.Fatalf("index %q, status %d; want 2 timers", got, e.ruleStatus(tr.name).Timers)
	}
}

// Keys under the reserved prefix are DENIED to every verb of a rule whose
// permissions allow every key, so a rule can neither forge nor delete nor
// read another rule's timers; the other rule's timer is untouched.
func TestTimerReservedPrefixDenied(t *testing.T) {
	e, clock := newTimerEnv(t)
	victim := e.loadTimerRule("victim")
	victim.arm(t, "v", time.Second, abi.TimerOptions{Payload: []byte("mine")})
	thief := e.loadTimerRule("thief")
	ctx := e.ctx()
	h := thief.h
	for _, key := range []string{timers.TimerKey(victim.name, "v"), timers.TimerShardKey(victim.name, timers.TimerShard("v")), timers.TimerDirKey(victim.name), ReservedPrefix + "other"} {
		calls := map[string]error{}
		_, calls["get"] = h.Get(ctx, key)
		_, calls["set"] = h.Set(ctx, key, timers.EncodeTimerRecord(t0, 0, []byte("forged")), abi.SetOptions{})
		calls["del"] = h.Del(ctx, key, abi.DelOptions{})
		calls["vdel"] = h.VDel(ctx, key, nil, abi.DelOptions{})
		calls["watch"] = h.Watch(ctx, key, abi.WatchOptions{})
		calls["unwatch"] = h.Unwatch(ctx, key)
		_, calls["lock"] = h.Lock(ctx, key, time.Second, abi.LockOptions{})
		calls["unlock"] = h.Unlock(ctx, key)
		for verb, err := range calls {
			if abi.StatusOf(err) != abi.StatusDenied {
				t.Errorf("%s %s: %v, want DENIED", verb, key, err)
			}
		}
	}
	if err := h.Cancel(ctx, "v"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Fatalf("thief cancels the victim's timer name: %v, want NOT_FOUND (its own timers only)", err)
	}
	clock.set(t0 + 1000)
	if f := victim.next(t); f.ev.Key != "v" || string(f.ev.Value) != "mine" {
		t.Fatalf("victim's timer: %+v", f.ev)
	}
}

// Damaged values in the store are skipped with a log line naming the key:
// a record that does not decode, a shard that does not decode; a name whose
// record is gone is dropped. The good timer (past its deadline) fires at
// once, late.
func TestTimerCorruptStoreSkipped(t *testing.T) {
	e, _ := newTimerEnv(t)
	const rule = "hurt.gorule"
	put := func(key string, value []byte) {
		t.Helper()
		if _, err := e.user.Set(e.ctx(), []byte(key), value, protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"good", "bad", "gone"}
	var dir timers.TimerDir
	for _, n := range names {
		dir.Put(timers.TimerShard(n), true)
		put(timers.TimerShardKey(rule, timers.TimerShard(n)), timers.EncodeTimerShard([]string{n}))
	}
	dir.Put(7, true)
	put(timers.TimerShardKey(rule, 7), []byte{1, 200}) // a name cut short
	put(timers.TimerDirKey(rule), dir.Encode())
	put(timers.TimerKey(rule, "good"), timers.EncodeTimerRecord(t0-5000, 0, []byte("ok")))
	put(timers.TimerKey(rule, "bad"), []byte{9, 9, 9})
	tr := e.loadTimerRule("hurt")
	f := tr.next(t)
	if f.ev.Key != "good" || !f.ev.Late || f.ev.Deadline != t0-5000 || string(f.ev.Value) != "ok" {
		t.Fatalf("event %+v; want good, late, its deadline and payload", f.ev)
	}
	if len(e.logLines("timer record unreadable", timers.TimerKey(rule, "bad"))) != 1 {
		t.Errorf("no log line naming the unreadable record:\n%s", e.logs)
	}
	if len(e.logLines("timer index shard unreadable", timers.TimerShardKey(rule, 7))) != 1 {
		t.Errorf("no log line naming the unreadable shard:\n%s", e.logs)
	}
	if got := tr.sync(t); len(got) != 0 {
		t.Fatalf("unexpected events %+v", got)
	}
	if err := tr.h.Cancel(e.ctx(), "bad"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Fatalf("cancel of the unreadable timer: %v, want NOT_FOUND", err)
	}
	waitFor(t, "no timer armed once good and the sentinel fired", func() bool { return e.ruleStatus(rule).Timers == 0 })
}

// An unreadable directory counts as listing every shard.
func TestTimerCorruptDirectoryReadsEveryShard(t *testing.T) {
	e, _ := newTimerEnv(t)
	const rule = "lost.gorule"
	for key, value := range map[string][]byte{
		timers.TimerDirKey(rule):                               {1, 2, 3},
		timers.TimerShardKey(rule, timers.TimerShard("found")): timers.EncodeTimerShard([]string{"found"}),
		timers.TimerKey(rule, "found"):                         timers.EncodeTimerRecord(t0, 0, nil),
	} {
		if _, err := e.user.Set(e.ctx(), []byte(key), value, protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr := e.loadTimerRule("lost")
	if f := tr.next(t); f.ev.Key != "found" {
		t.Fatalf("event %+v", f.ev)
	}
	if len(e.logLines("timer directory unreadable", timers.TimerDirKey(rule))) != 1 {
		t.Errorf("no log line naming the directory:\n%s", e.logs)
	}
}

// Without the store, timer and cancel fail with UNAVAILABLE and nothing is
// scheduled.
func TestTimerStoreOffline(t *testing.T) {
	e, _ := newTimerEnv(t)
	tr := e.loadTimerRule("offline")
	tr.arm(t, "kept", time.Hour, abi.TimerOptions{})
	if err := e.client.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := e.ctx()
	err := tr.h.Timer(ctx, "new", 0, abi.TimerOptions{})
	if abi.StatusOf(err) != abi.StatusUnavailable || !errors.Is(err, protocol.ErrClosed) {
		t.Fatalf("timer offline: %v, want UNAVAILABLE", err)
	}
	if err := tr.h.Cancel(ctx, "kept"); abi.StatusOf(err) != abi.StatusUnavailable {
		t.Fatalf("cancel offline: %v, want UNAVAILABLE", err)
	}
	if n := e.ruleStatus(tr.name).Timers; n != 1 {
		t.Fatalf("armed %d, want 1 (the failed arm scheduled nothing, the failed cancel kept it)", n)
	}
	if n := e.host.timers.Pending(); n != 1 {
		t.Fatalf("scheduler holds %d timers, want 1", n)
	}
}

// Now is the host's timer clock.
func TestTimerNow(t *testing.T) {
	e, clock := newTimerEnv(t)
	tr := e.loadTimerRule("now")
	clock.set(t0 + 42)
	if got := tr.h.Now(); got != t0+42 {
		t.Fatalf("Now() = %d, want t0+42", got)
	}
}

// The host's clock is the wall clock, or the client's HLC when the store's
// clock runs ahead of it.
func TestHostClockFollowsHLC(t *testing.T) {
	e := newEnv(t)
	c := timers.HostClock{Client: e.client, Clock: clock.Real{}}
	before := time.Now().UnixMilli()
	if got := c.NowMs(); got < before {
		t.Fatalf("nowMs %d behind the wall clock %d", got, before)
	}
	v := e.set("hlc", "x") // the host's client sees this version when it writes next
	if _, err := e.client.Set(e.ctx(), []byte("hlc2"), []byte("y"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := c.NowMs(); got < e.client.Now().Wall {
		t.Fatalf("nowMs %d behind the client's HLC %s (store version %s)", got, e.client.Now(), v)
	}
}

func FuzzDecodeTimerValues(f *testing.F) {
	f.Add(timers.EncodeTimerRecord(t0, 10, []byte("p")))
	f.Add(timers.EncodeTimerShard([]string{"a", "bb"}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, every, _, err := timers.DecodeTimerRecord(b); err == nil && (d <= 0 || every < 0) {
			t.Fatalf("accepted deadline %d, every %d", d, every)
		}
		if names, err := timers.DecodeTimerShard(b); err == nil {
			for _, n := range names {
				if n == "" || len(n) > MaxTimerName {
					t.Fatalf("accepted name %q", n)
				}
			}
		}
		_, _ = timers.DecodeTimerDir(b)
	})
}

// The scheduler holds no goroutine or time.Timer per timer: its timers come
// out in deadline order, and unschedule takes one out.
func TestSchedulerOrder(t *testing.T) {
	clock := newFakeTimerClock()
	s := timers.NewScheduler(clock, nil)
	got := make(chan string, 10)
	owner := ownerFunc(func(tm *timers.Timer, _ int64) { got <- tm.Name })
	var ts []*timers.Timer
	for i, at := range []int64{30, 10, 20, 40} {
		tm := &timers.Timer{Owner: owner, Name: string(rune('a' + i)), Index: -1}
		ts = append(ts, tm)
		s.Schedule(tm, t0+at)
	}
	s.Unschedule(ts[3])
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	clock.set(t0 + 100)
	var order []string
	for range 3 {
		select {
		case n := <-got:
			order = append(order, n)
		case <-time.After(30 * time.Second):
			t.Fatal("timers did not fire")
		}
	}
	if strings.Join(order, "") != "bca" || s.Pending() != 0 {
		t.Fatalf("order %q, pending %d; want bca, 0 (d unscheduled)", order, s.Pending())
	}
}

type ownerFunc func(t *timers.Timer, now int64)

func (f ownerFunc) Fire(t *timers.Timer, now int64) { f(t, now) }

func (f ownerFunc) OwnerName() string { return "" }
