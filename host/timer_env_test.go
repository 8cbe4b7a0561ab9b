package host

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// fakeTimerClock is a timeSource the test moves by hand: the scheduler's alarms
// ring when set moves the time past them.
type fakeTimerClock struct {
	mu     sync.Mutex
	now    int64
	alarms []*fakeAlarm
}

// t0 is where the fake clocks of the tests start (Unix ms, in 2024).
const t0 int64 = 1_732_000_000_000

func newFakeTimerClock() *fakeTimerClock { return &fakeTimerClock{now: t0} }

func (c *fakeTimerClock) NowMs() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeTimerClock) NewAlarm() timers.Alarm {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := &fakeAlarm{c: c, ch: make(chan struct{}, 1)}
	c.alarms = append(c.alarms, a)
	return a
}

// set moves the clock to ms and rings the alarms due by then.
func (c *fakeTimerClock) set(ms int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = ms
	for _, a := range c.alarms {
		a.ringLocked()
	}
}

type fakeAlarm struct {
	c     *fakeTimerClock
	ch    chan struct{}
	at    int64
	armed bool
}

func (a *fakeAlarm) C() <-chan struct{} { return a.ch }

func (a *fakeAlarm) Took() {}

func (a *fakeAlarm) SetAt(at int64) {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	a.at, a.armed = at, true
	a.ringLocked()
}

func (a *fakeAlarm) Stop() {
	a.c.mu.Lock()
	defer a.c.mu.Unlock()
	a.armed = false
}

func (a *fakeAlarm) ringLocked() {
	if a.armed && a.at <= a.c.now {
		a.armed = false
		select {
		case a.ch <- struct{}{}:
		default:
		}
	}
}

// firing is a TIMER event a test rule handled, and the host's clock then.
type firing struct {
	ev abi.Event
	at int64
}

// timerRule is a Go rule the test drives through its binding (h, kept from
// its start) and whose TIMER events it collects.
type timerRule struct {
	name  string
	h     abi.Host
	fired chan firing
	// block, when set, is received from before each event is handled.
	block chan struct{}
}

// loadTimerRule loads the Go rule name (file name.gorule), which records
// every TIMER event it handles.
func (e *env) loadTimerRule(name string) *timerRule {
	e.t.Helper()
	tr := &timerRule{name: name + ".gorule", fired: make(chan firing, 1000)}
	e.load(name, tr.rule())
	return tr
}

func (tr *timerRule) rule() goRule {
	return goRule{
		init: func(_ context.Context, h abi.Host) error { tr.h = h; return nil },
		handle: func(_ context.Context, h abi.Host, ev abi.Event) error {
			if tr.block != nil {
				<-tr.block
			}
			if ev.Op == abi.OpTimer {
				tr.fired <- firing{ev: ev, at: h.Now()}
			}
			return nil
		},
	}
}

func (tr *timerRule) arm(t *testing.T, name string, delay time.Duration, opts abi.TimerOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.h.Timer(ctx, name, delay, opts); err != nil {
		t.Fatalf("timer %q: %v", name, err)
	}
}

// next waits for the rule's next TIMER event.
func (tr *timerRule) next(t *testing.T) firing {
	t.Helper()
	select {
	case f := <-tr.fired:
		return f
	case <-time.After(30 * time.Second):
		t.Fatalf("rule %s: no TIMER event within 30 s", tr.name)
		return firing{}
	}
}

// none checks that no TIMER event is waiting.
func (tr *timerRule) none(t *testing.T) {
	t.Helper()
	select {
	case f := <-tr.fired:
		t.Fatalf("rule %s: unexpected TIMER event %+v", tr.name, f.ev)
	default:
	}
}

// sync proves the scheduler has handled the clock as it is now: it arms a
// sentinel timer due at once and waits for its event, which comes after
// the event of every timer already due (the rule handles its events in
// order). Events before it are returned.
func (tr *timerRule) sync(t *testing.T) []firing {
	t.Helper()
	tr.arm(t, "sentinel", 0, abi.TimerOptions{})
	var before []firing
	for {
		f := tr.next(t)
		if f.ev.Key == "sentinel" {
			return before
		}
		before = append(before, f)
	}
}

// timerEnv is a host with a fake timer clock.
func newTimerEnv(t *testing.T, opts ...func(*Config)) (*env, *fakeTimerClock) {
	t.Helper()
	c := newFakeTimerClock()
	return newEnv(t, append([]func(*Config){func(o *Config) { o.clock = c }}, opts...)...), c
}

// record reads the store's record of the timer name of rule (a file name).
func (e *env) record(rule, name string) (deadline, every int64, payload string, found bool) {
	e.t.Helper()
	res, err := e.user.Get(e.ctx(), []byte(timers.TimerKey(rule, name)), protocol.CallOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if !res.Found {
		return 0, 0, "", false
	}
	d, ev, p, err := timers.DecodeTimerRecord(res.Value)
	if err != nil {
		e.t.Fatalf("record of %s/%s: %v", rule, name, err)
	}
	return d, ev, string(p), true
}

// indexed reads the names in the store's index of rule's timers.
func (e *env) indexed(rule string) []string {
	e.t.Helper()
	res, err := e.user.Get(e.ctx(), []byte(timers.TimerDirKey(rule)), protocol.CallOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	if !res.Found {
		return nil
	}
	dir, err := timers.DecodeTimerDir(res.Value)
	if err != nil {
		e.t.Fatal(err)
	}
	var names []string
	for i := range timers.TimerShards {
		if !dir.Has(i) {
			continue
		}
		res, err := e.user.Get(e.ctx(), []byte(timers.TimerShardKey(rule, i)), protocol.CallOptions{})
		if err != nil {
			e.t.Fatal(err)
		}
		if !res.Found { // its last name just left it; the directory follows
			continue
		}
		ns, err := timers.DecodeTimerShard(res.Value)
		if err != nil {
			e.t.Fatal(err)
		}
		names = append(names, ns...)
	}
	slices.Sort(names)
	return names
}

// waitGone waits until the timer's record and index entry are gone.
func (e *env) waitGone(rule, name string) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("timer %s/%s deleted from the store", rule, name), func() bool {
		_, _, _, found := e.record(rule, name)
		return !found && !slices.Contains(e.indexed(rule), name)
	})
}
