package host

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/timers"
)

// loadVersion registers r as the rule version and (re)loads the file
// file.gorule with it.
func (e *env) loadVersion(file, version string, r goRule) string {
	e.t.Helper()
	e.rt.register(version, r)
	p := filepath.Join(e.dir, file+".gorule")
	if err := os.WriteFile(p, []byte(version), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if err := e.host.Load(e.ctx(), p); err != nil {
		e.t.Fatalf("load %s as %s: %v", file, version, err)
	}
	return p
}

// versionRule is a timerRule whose start also runs arm (when set).
func versionRule(tr *timerRule, arm func(ctx context.Context, h abi.Host) error) goRule {
	r := tr.rule()
	init := r.init
	r.init = func(ctx context.Context, h abi.Host) error {
		if err := init(ctx, h); err != nil {
			return err
		}
		if arm == nil {
			return nil
		}
		return arm(ctx, h)
	}
	return r
}

// A timer belongs to the rule, not a version: armed by v1, after a hot
// reload it fires once, in v2.
func TestTimerAcrossHotReload(t *testing.T) {
	e, clock := newTimerEnv(t)
	v1 := &timerRule{name: "keep.gorule", fired: make(chan firing, 100)}
	v2 := &timerRule{name: "keep.gorule", fired: make(chan firing, 100)}
	e.loadVersion("keep", "keep-v1", versionRule(v1, nil))
	v1.arm(t, "k", time.Second, abi.TimerOptions{Payload: []byte("kept")})
	e.loadVersion("keep", "keep-v2", versionRule(v2, nil))
	if n := e.ruleStatus("keep.gorule").Timers; n != 1 {
		t.Fatalf("after the reload %d timers armed, want 1", n)
	}
	clock.set(t0 + 1000)
	if f := v2.next(t); f.ev.Key != "k" || string(f.ev.Value) != "kept" || f.ev.Deadline != t0+1000 {
		t.Fatalf("v2's event %+v", f.ev)
	}
	if got := v2.sync(t); len(got) != 0 {
		t.Fatalf("fired twice: %+v", got[0].ev)
	}
	v1.none(t)
	if err := v1.h.Timer(e.ctx(), "late", 0, abi.TimerOptions{}); abi.StatusOf(err) != abi.StatusUnavailable {
		t.Fatalf("the replaced version arms a timer: %v, want UNAVAILABLE", err)
	}
}

// A rule edit whose new version re-arms a timer when it starts: the new arm
// wins (the old deadline does not fire), and a timer the new version arms
// while it starts fires in it, never in the version it replaces.
func TestTimerRuleEditRearms(t *testing.T) {
	e, clock := newTimerEnv(t)
	v1 := &timerRule{name: "edit.gorule", fired: make(chan firing, 100)}
	v2 := &timerRule{name: "edit.gorule", fired: make(chan firing, 100)}
	e.loadVersion("edit", "edit-v1", versionRule(v1, func(ctx context.Context, h abi.Host) error {
		return h.Timer(ctx, "x", time.Second, abi.TimerOptions{Payload: []byte("v1")})
	}))
	e.loadVersion("edit", "edit-v2", versionRule(v2, func(ctx context.Context, h abi.Host) error {
		if err := h.Timer(ctx, "at-once", 0, abi.TimerOptions{}); err != nil {
			return err
		}
		return h.Timer(ctx, "x", 3*time.Second, abi.TimerOptions{Payload: []byte("v2")})
	}))
	if f := v2.next(t); f.ev.Key != "at-once" {
		t.Fatalf("v2's first event %+v, want at-once", f.ev)
	}
	clock.set(t0 + 1000)
	if got := v2.sync(t); len(got) != 0 {
		t.Fatalf("the old deadline fired: %+v", got[0].ev)
	}
	clock.set(t0 + 3000)
	if f := v2.next(t); f.ev.Key != "x" || string(f.ev.Value) != "v2" || f.ev.Deadline != t0+3000 {
		t.Fatalf("event %+v; want x of v2 at t0+3000", f.ev)
	}
	v1.none(t)
}

// A rule whose file is removed drops its timers: records and index are
// deleted from the store. Closing the host keeps the other rule's.
func TestTimerRemovedRuleDropsTimers(t *testing.T) {
	e, _ := newTimerEnv(t)
	gone := e.loadTimerRule("gone")
	stays := e.loadTimerRule("stays")
	for _, n := range []string{"a", "b", "c"} {
		gone.arm(t, n, time.Hour, abi.TimerOptions{Every: time.Minute})
	}
	stays.arm(t, "s", time.Hour, abi.TimerOptions{})
	if err := e.host.Remove(e.ctx(), filepath.Join(e.dir, "gone.gorule")); err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{timers.TimerKey(gone.name, "a"), timers.TimerKey(gone.name, "b"), timers.TimerKey(gone.name, "c"),
		timers.TimerShardKey(gone.name, timers.TimerShard("a")), timers.TimerShardKey(gone.name, timers.TimerShard("b")), timers.TimerShardKey(gone.name, timers.TimerShard("c")),
		timers.TimerDirKey(gone.name)} {
		if _, found := e.get(key); found {
			t.Errorf("%s still in the store after the rule was removed", key)
		}
	}
	if n := e.host.timers.Pending(); n != 1 {
		t.Fatalf("scheduler holds %d timers, want 1 (stays's)", n)
	}
	if err := e.host.Close(e.ctx()); err != nil {
		t.Fatal(err)
	}
	if _, _, _, ok := e.record(stays.name, "s"); !ok {
		t.Fatal("closing the host deleted a timer")
	}
}

// A handler stuck in a TIMER event past its deadline and the grace is
// abandoned when the rule is reloaded; the firing was not recorded, so the
// new version gets it again, late (at least once), and records it.
func TestTimerAbandonedHandlerFiresAgain(t *testing.T) {
	e, _ := newTimerEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"stuck.gorule": {Timeout: 50 * time.Millisecond, Grace: 50 * time.Millisecond}}
	})
	release := make(chan struct{})
	inCall := make(chan struct{}, 1)
	v1 := &timerRule{name: "stuck.gorule", fired: make(chan firing, 100)}
	r1 := v1.rule()
	r1.handle = func(context.Context, abi.Host, abi.Event) error { // ignores its context
		inCall <- struct{}{}
		<-release
		return nil
	}
	e.loadVersion("stuck", "stuck-v1", r1)
	defer close(release)
	v1.arm(t, "s", 0, abi.TimerOptions{Payload: []byte("again")})
	<-inCall
	v2 := &timerRule{name: "stuck.gorule", fired: make(chan firing, 100)}
	e.loadVersion("stuck", "stuck-v2", versionRule(v2, nil))
	if n := e.ruleStatus("stuck.gorule").Abandoned; n != 1 {
		t.Fatalf("abandoned %d calls, want 1", n)
	}
	f := v2.next(t)
	if f.ev.Key != "s" || !f.ev.Late || string(f.ev.Value) != "again" || f.ev.Deadline != t0 {
		t.Fatalf("v2's event %+v; want s again, late", f.ev)
	}
	e.waitGone("stuck.gorule", "s")
}
