// Package doortest is the end-to-end test every door-alarm example (Lua, Go
// WebAssembly) passes: the same behaviour in each language, checked through
// the real host on the embedded broker, with the host restarted while a
// timer is pending.
//
// The behaviour: the rule watches door/front. When the door opens it
// records door/open_since (the host's clock, once per opening) and arms
// the timer "door-open" for door/open_alarm_ms after that moment; when the
// timer fires it writes door/alarm = {"since": ms, "late": bool}. Any other
// door state cancels the timer and deletes door/open_since and door/alarm.
package doortest

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/protocol"
)

// Keys of the door-alarm examples.
const (
	Door  = "door/front"
	Limit = "door/open_alarm_ms"
	Since = "door/open_since"
	Alarm = "door/alarm"
)

// alarm is the value of door/alarm.
type alarm struct {
	Since int64 `json:"since"`
	Late  bool  `json:"late"`
}

type fixture struct {
	*examplehost.Restartable
	t      *testing.T
	events uint64 // the events the running host's rule must have handled
	alarms int    // door/alarm SETs so far
}

// Run plays the scenario on the rule file in dir with runtimes.
func Run(t *testing.T, dir string, runtimes ...abi.Runtime) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := &fixture{Restartable: examplehost.StartRestartable(ctx, t, dir, runtimes...), t: t}
	f.Record(Alarm)

	// 1. The door opens; the host stops before the deadline and stays
	// down past it; the next host raises the alarm at once, late.
	f.Set(Limit, "3000")
	since := f.open()
	f.restart(func() { examplehost.WaitClock(t, since+3000) })
	if got, _ := f.alarm(); got.Since != since || !got.Late {
		t.Fatalf("alarm after a restart past the deadline: %+v, want since %d, late", got, since)
	}
	f.close()

	// 2. The door opens; the host restarts well before the deadline; the
	// new host raises the alarm on time: not late, and not before it.
	f.Set(Limit, "6000")
	since = f.open()
	f.restart(nil)
	got, wall := f.alarm()
	if got.Since != since || got.Late {
		t.Fatalf("alarm after a restart before the deadline: %+v, want since %d, not late", got, since)
	}
	if wall < since+6000 {
		t.Fatalf("alarm written at %d, %d ms before its deadline %d", wall, since+6000-wall, since+6000)
	}
	f.close()

	// 3. A repeated "open" does not postpone the alarm; closing the door
	// in time cancels it: once its deadline has passed, a later opening
	// raises only its own alarm.
	f.Set(Limit, "3000")
	cancelled := f.open()
	f.door("open") // the sensor repeats itself
	if got := f.Get(Since); got != strconv.FormatInt(cancelled, 10) {
		t.Fatalf("a repeated open moved %s to %q, want %d", Since, got, cancelled)
	}
	f.close()
	examplehost.WaitClock(t, cancelled+3000)
	f.Set(Limit, "0") // due at once: the TIMER may be handled before we look
	f.Set(Door, "open")
	f.events++
	got, _ = f.alarm()
	if since, _ = strconv.ParseInt(f.Get(Since), 10, 64); got.Since != since {
		t.Fatalf("alarm %+v after a cancelled one, want since %d (the cancelled opening was at %d)", got, since, cancelled)
	}
	f.close()
}

func (f *fixture) restart(while func()) {
	f.t.Helper()
	f.Restart(while)
	f.events = 0
}

// alarm waits for the next SET of door/alarm (there must be no other) and
// returns it with the wall time of its version (Unix ms).
func (f *fixture) alarm() (alarm, int64) {
	f.t.Helper()
	f.alarms++
	var sets []protocol.Event
	for _, ev := range f.WaitChanges(Alarm, 2*f.alarms-1) { // each alarm was deleted since
		if ev.Op == protocol.OpSet {
			sets = append(sets, ev)
		}
	}
	if len(sets) != f.alarms {
		f.t.Fatalf("door/alarm set %d times, want %d", len(sets), f.alarms)
	}
	ev := sets[len(sets)-1]
	var a alarm
	if err := json.Unmarshal(ev.Value, &a); err != nil {
		f.t.Fatalf("%s = %q: not the documented JSON: %v", Alarm, ev.Value, err)
	}
	f.events++ // the TIMER event
	f.WaitHandled(f.events)
	return a, ev.Version.Wall
}

// door sets the door's state and waits until the rule has handled it.
func (f *fixture) door(state string) {
	f.t.Helper()
	f.Set(Door, state)
	f.events++
	f.WaitHandled(f.events)
}

// open opens the door and returns the moment the rule recorded in
// door/open_since.
func (f *fixture) open() int64 {
	f.t.Helper()
	f.door("open")
	since, err := strconv.ParseInt(f.Get(Since), 10, 64)
	if err != nil {
		f.t.Fatalf("%s: %v", Since, err)
	}
	return since
}

// close closes the door and checks the rule cleared its keys.
func (f *fixture) close() {
	f.t.Helper()
	f.door("closed")
	for _, k := range []string{Since, Alarm} {
		if v := f.Get(k); v != "" {
			f.t.Fatalf("door closed, %s = %q, want absent", k, v)
		}
	}
}
