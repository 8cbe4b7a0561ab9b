package lua

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// timerEvent is the TIMER event of the timer name.
func timerEvent(name, payload string, deadline int64, late bool) abi.Event {
	return abi.Event{Key: name, Op: abi.OpTimer, Value: []byte(payload), Deadline: deadline, Late: late}
}

func TestTimerEventFields(t *testing.T) {
	h := abitest.New()
	s := startRule(t, `
local ss = require("ssrun")
function on_event(ev)
  ss.log("info", string.format("%s|%s|%s|%s|%s|%s|%s|%s", ev.op, ev.key, type(ev.value), tostring(ev.value),
    type(ev.deadline), tostring(ev.deadline), type(ev.late), tostring(ev.late)))
end`, h, abi.Limits{})
	for _, ev := range []abi.Event{
		timerEvent("door", "open-too-long", 1700000001623, false),
		timerEvent("t\x00", "\r\n\x00\xff", 1700000001623, true),
		{Key: "t", Op: abi.OpTimer, Deadline: 1}, // no payload: ""
		setEvent("k", "v"),                       // no deadline nor late on other events
	} {
		if err := s.Handle(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	want := []string{
		"TIMER|door|string|open-too-long|number|1700000001623|boolean|false",
		"TIMER|t\x00|string|\r\n\x00\xff|number|1700000001623|boolean|true",
		"TIMER|t|string||number|1|boolean|false",
		"SET|k|string|v|nil|nil|nil|nil",
	}
	if got := logs(h); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("events seen as\n%q\nwant\n%q", got, want)
	}
}

// TestTimerFailuresSurface checks that every failure the host can return
// from timer and cancel reaches the rule as nil, message, code (cancel's
// NOT_FOUND as false), and that the rule goes on.
func TestTimerFailuresSurface(t *testing.T) {
	for _, verb := range []string{abi.FnTimer, abi.FnCancel} {
		for _, f := range abitest.Failures(verb) {
			t.Run(verb+"/"+f.Name, func(t *testing.T) {
				h := abitest.New()
				h.Fail(verb, f.Err)
				expr := `ss.cancel("t")`
				if verb == abi.FnTimer {
					expr = `ss.timer("t", 10, {every = 5, payload = "p"})`
				}
				want := fmt.Sprintf("nil:nil | string:%s | string:%s", f.Err, f.Status)
				if verb == abi.FnCancel && f.Status == abi.StatusNotFound {
					want = "boolean:false"
				}
				if got := evalRule(t, h, expr); got != want {
					t.Errorf("got %q, want %q", got, want)
				}
				if n := len(h.Timers()); n != 0 {
					t.Errorf("%d timers armed after a failure", n)
				}
			})
		}
	}
}

// doorRule is the rule of issue 9's "what a user would try": an alarm when
// the door stays open for 1.5 s.
const doorRule = `
local ss = require("ssrun")
ss.watch("door")
function on_event(ev)
  if ev.op == "TIMER" then
    ss.set("alarm", ev.value .. (ev.late and " (late)" or ""))
    ss.set("alarm_due", ev.deadline)
  elseif ev.value == "open" then
    assert(ss.timer("door", 1500, {payload = "open-too-long"}))
  elseif ev.value == "closed" then
    ss.set("cancelled", tostring(ss.cancel("door")))
  end
end`

func TestDoorRule(t *testing.T) {
	h := abitest.New()
	const t0 = 1700000000000
	h.SetNow(t0)
	s := startRule(t, doorRule, h, abi.Limits{})
	ctx := context.Background()
	handle := func(ev abi.Event) {
		t.Helper()
		if err := s.Handle(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	stored := func(key string) string { v, _ := h.Value(key); return string(v) }

	handle(setEvent("door", "open"))
	armed("door", t0+1500, 0, "open-too-long")(t, h)
	handle(setEvent("door", "closed"))
	noTimers(t, h)
	if got := stored("cancelled"); got != "true" {
		t.Errorf("cancel of the armed timer returned %q, want true", got)
	}
	handle(setEvent("door", "closed")) // nothing armed any more
	if got := stored("cancelled"); got != "false" {
		t.Errorf("cancel of an unarmed timer returned %q, want false", got)
	}

	// Open twice: the second arms again from its own time (debounce).
	handle(setEvent("door", "open"))
	h.SetNow(t0 + 1000)
	handle(setEvent("door", "open"))
	armed("door", t0+2500, 0, "open-too-long")(t, h)

	// The host fires it (late, after a restart).
	tm := h.Timers()["door"]
	handle(timerEvent("door", string(tm.Payload), tm.Deadline, true))
	if got, want := stored("alarm"), "open-too-long (late)"; got != want {
		t.Errorf("alarm %q, want %q", got, want)
	}
	if got, want := stored("alarm_due"), fmt.Sprint(t0+2500); got != want {
		t.Errorf("alarm_due %q, want %q", got, want)
	}
	if h.Calls(abi.FnNow) != 0 {
		t.Errorf("the rule read the clock %d times; it never calls ss.now", h.Calls(abi.FnNow))
	}
}

// TestTimerPayloadIsAccounted checks that a payload counts in the rule's
// memory account like any other string the host copies: a rule holding a
// 5 MiB string under an 8 MiB limit cannot hand the host a copy of it.
func TestTimerPayloadIsAccounted(t *testing.T) {
	h := abitest.New()
	s := startRule(t, `
local ss = require("ssrun")
local big = string.rep("x", 5 * 1024 * 1024)
function on_event(ev)
  ss.timer("t", 1, {payload = big})
end`, h, abi.Limits{MemoryBytes: 8 << 20, CallTimeout: time.Minute})
	err := s.Handle(context.Background(), setEvent("k", "v"))
	wantErr(t, err, abi.ErrMemory, 5)
	if h.Calls(abi.FnTimer) != 0 {
		t.Errorf("the host was called")
	}
}
