package ruletest

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// Command is an event that makes a test rule run cmd with args.
func Command(cmd string, args ...string) abi.Event {
	var v []byte
	for _, a := range args {
		v = abi.AppendField(v, []byte(a))
	}
	return abi.Event{Key: cmd, Op: abi.OpSet, Value: v}
}

// Reports returns the rule's "report ..." lines logged on h at info level,
// without the prefix.
func Reports(h *abitest.Host) []string {
	var out []string
	for _, l := range h.Logs() {
		if r, ok := strings.CutPrefix(l.Msg, "report "); ok && l.Level == abi.LevelInfo {
			out = append(out, r)
		}
	}
	return out
}

// Run delivers ev to s and returns the one report it produced on h.
func Run(t testing.TB, s abi.Script, h *abitest.Host, ev abi.Event) string {
	t.Helper()
	before := len(Reports(h))
	if err := s.Handle(context.Background(), ev); err != nil {
		t.Fatalf("Handle(%s): %v", ev.Key, err)
	}
	r := Reports(h)
	if len(r) != before+1 {
		t.Fatalf("Handle(%s): %d reports, want 1; logs: %v", ev.Key, len(r)-before, h.Logs())
	}
	return r[len(r)-1]
}

// Events are events for a rule's "event" command, which reports the event
// as received: binary, empty and big (the caller's) values, a version, a
// resync, a delete, a lost lock, and a late and an on-time timer.
func Events(big []byte) []abi.Event {
	return []abi.Event{
		{Key: "event", Op: abi.OpSet, Value: []byte("\x00v\xff"), Version: "001732000000000:00001:StateStore"},
		{Key: "event", Op: abi.OpSet, Value: []byte{}, Version: "v", Resync: true},
		{Key: "event", Op: abi.OpSet, Value: big},
		{Key: "event", Op: abi.OpDelete, Version: "v2"},
		{Key: "event", Op: abi.OpLockLost},
		{Key: "event", Op: abi.OpTimer, Value: []byte("\x00payload\xff"), Deadline: 1732000000123, Late: true},
		{Key: "event", Op: abi.OpTimer, Value: []byte{}, Deadline: 1},
	}
}

// Binary is a value with a NUL, a 0xff and a line break in it.
const Binary = "\x00\x01\xff\r\n"

// VerbCase runs one command in a test rule against an abitest.Host.
type VerbCase struct {
	Name  string
	Setup func(h *abitest.Host)
	Cmd   []string // command and its arguments
	Want  string   // the report line, without "report "
	Check func(t *testing.T, h *abitest.Host)
}

// NotCalled checks that verb never reached the host.
func NotCalled(verb string) func(t *testing.T, h *abitest.Host) {
	return func(t *testing.T, h *abitest.Host) {
		if c, ok := h.LastCall(verb); ok {
			t.Errorf("host %s was called (%+v); the call should fail before reaching the host", verb, c)
		}
	}
}

// LockL makes the rule hold the lock "L".
func LockL(h *abitest.Host) { _, _ = h.Lock(context.Background(), "L", time.Second, abi.LockOptions{}) }

// timerCases are the cases of timer, cancel and now (revision 2): the
// arguments reach the host as given (names and payloads binary-safe,
// durations to the millisecond), re-arming replaces, an empty payload stays
// empty, and the host's refusals come back with their status.
func timerCases() []VerbCase {
	armed := func(name string, want abitest.Timer) func(t *testing.T, h *abitest.Host) {
		return func(t *testing.T, h *abitest.Host) {
			got, ok := h.Timers()[name]
			if !ok || got.Deadline != want.Deadline || got.Every != want.Every || !bytes.Equal(got.Payload, want.Payload) || (got.Payload == nil) != (want.Payload == nil) {
				t.Errorf("timer %q: %+v (armed %t), want %+v", name, got, ok, want)
			}
		}
	}
	const now = 1732000000000
	at := func(h *abitest.Host) { h.SetNow(now) }
	return []VerbCase{
		{Name: "timer ok binary", Setup: at, Cmd: []string{"timer", "t\x00\xff", "1500ms", "0s", Binary},
			Want:  `timer status=OK msg=""`,
			Check: armed("t\x00\xff", abitest.Timer{Deadline: now + 1500, Payload: []byte(Binary)})},
		{Name: "timer every, empty payload", Setup: at, Cmd: []string{"timer", "t", "0s", "30s", ""},
			Want:  `timer status=OK msg=""`,
			Check: armed("t", abitest.Timer{Deadline: now, Every: 30 * time.Second, Payload: []byte{}})},
		{Name: "timer re-arm replaces", Setup: func(h *abitest.Host) {
			at(h)
			_ = h.Timer(context.Background(), "t", time.Hour, abi.TimerOptions{Every: time.Minute, Payload: []byte("old")})
		}, Cmd: []string{"timer", "t", "2s", "0s", "new"}, Want: `timer status=OK msg=""`,
			Check: armed("t", abitest.Timer{Deadline: now + 2000, Payload: []byte("new")})},
		{Name: "timer negative delay", Cmd: []string{"timer", "t", "-1ms", "0s", ""},
			Want: `timer status=INVALID msg="timer \"t\": negative delay or period"`},
		{Name: "timer empty name", Cmd: []string{"timer", "", "1s", "0s", ""},
			Want: `timer status=INVALID msg="timer: empty key"`},
		{Name: "cancel ok", Setup: func(h *abitest.Host) { _ = h.Timer(context.Background(), "t", time.Hour, abi.TimerOptions{}) },
			Cmd: []string{"cancel", "t"}, Want: `cancel status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Timers()["t"]; ok {
					t.Error("timer still armed")
				}
			}},
		{Name: "cancel not armed", Cmd: []string{"cancel", "t"}, Want: `cancel status=NOT_FOUND msg="cancel \"t\": no such timer"`},
		{Name: "now", Setup: func(h *abitest.Host) { h.SetNow(1732000000123) },
			Cmd: []string{"now"}, Want: `now status=OK msg="" ms=1732000000123`},
	}
}

// okArgs are valid arguments for each verb (used with injected failures).
var okArgs = map[string][]string{
	abi.FnGet:     {"get", "k"},
	abi.FnSet:     {"set", "k", "v", "0", "0s", ""},
	abi.FnDel:     {"del", "k", ""},
	abi.FnVDel:    {"vdel", "k", "v", ""},
	abi.FnWatch:   {"watch", "k", ""},
	abi.FnUnwatch: {"unwatch", "k"},
	abi.FnLock:    {"lock", "L", "10s", "0s"},
	abi.FnUnlock:  {"unlock", "L"},
	abi.FnTimer:   {"timer", "t", "1s", "0s", ""},
	abi.FnCancel:  {"cancel", "t"},
}

// emptyResults is how the rule reports a failed verb's results.
var emptyResults = map[string]string{
	abi.FnGet:  ` value=nil version=""`,
	abi.FnSet:  ` version=""`,
	abi.FnLock: ` token=""`,
}

// VerbCases returns the cases every runtime's test rule must pass on a
// fresh Host: arguments (binary-safe), options, results, every status and
// its message, and every failure a Host may return (abitest.Failures).
func VerbCases() []VerbCase {
	v := abitest.Version
	cases := []VerbCase{
		// get
		{Name: "get ok binary", Setup: func(h *abitest.Host) { h.Put("k\x00\xff", []byte(Binary)) },
			Cmd:  []string{"get", "k\x00\xff"},
			Want: `get status=OK msg="" value=x0001ff0d0a version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnGet); !c.HasDeadline {
					t.Error("host get ran without the call's deadline")
				}
			}},
		{Name: "get ok empty value", Setup: func(h *abitest.Host) { h.Put("e", []byte{}) },
			Cmd: []string{"get", "e"}, Want: `get status=OK msg="" value=x version="` + v(1) + `"`},
		{Name: "get not found", Cmd: []string{"get", "absent"},
			Want: `get status=NOT_FOUND msg="get \"absent\": not found" value=nil version=""`},
		{Name: "get empty key", Cmd: []string{"get", ""},
			Want: `get status=INVALID msg="get: empty key" value=nil version=""`},
		{Name: "get denied", Setup: func(h *abitest.Host) { h.Deny = func(_, key string) bool { return key == "secret" } },
			Cmd: []string{"get", "secret"}, Want: `get status=DENIED msg="get \"secret\": not permitted" value=nil version=""`},

		// set
		{Name: "set ttl rounded up to ms", Cmd: []string{"set", "k", "v", "0", "1500100us", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.TTL != 1501*time.Millisecond {
					t.Errorf("ttl %v, want 1.501s", c.Set.TTL)
				}
			}},
		{Name: "set nx not applied", Setup: func(h *abitest.Host) { h.Put("k", []byte("old")) },
			Cmd:  []string{"set", "k", "new", "1", "0s", ""},
			Want: `set status=NOT_APPLIED msg="set \"k\": not applied" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.Cond != abi.CondNX {
					t.Errorf("cond %v, want NX", c.Set.Cond)
				}
			}},
		{Name: "set nx applied", Cmd: []string{"set", "k", "new", "1", "0s", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`},
		{Name: "set nex equal", Setup: func(h *abitest.Host) { h.Put("k", []byte("same")) },
			Cmd: []string{"set", "k", "same", "2", "0s", ""}, Want: `set status=OK msg="" version="` + v(2) + `"`},
		{Name: "set nex differs", Setup: func(h *abitest.Host) { h.Put("k", []byte("old")) },
			Cmd: []string{"set", "k", "new", "2", "0s", ""}, Want: `set status=NOT_APPLIED msg="set \"k\": not applied" version="` + v(1) + `"`},
		{Name: "set fenced by held lock", Setup: LockL,
			Cmd:  []string{"set", "k", "v", "0", "0s", "L"},
			Want: `set status=OK msg="" version="` + v(2) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.Fence != "L" {
					t.Errorf("fence %q, want L", c.Set.Fence)
				}
			}},
		{Name: "set fence not held", Cmd: []string{"set", "k", "v", "0", "0s", "L"},
			Want: `set status=LOCK_LOST msg="fence \"L\": lock not held" version=""`},
		{Name: "set negative ttl", Cmd: []string{"set", "k", "v", "0", "-1s", ""},
			Want: `set status=INVALID msg="set \"k\": ttl -1000 ms out of range" version=""`, Check: NotCalled(abi.FnSet)},
		{Name: "set unknown condition", Cmd: []string{"set", "k", "v", "7", "0s", ""},
			Want:  `set status=INVALID msg="set \"k\": unknown condition 7 (want 0 none, 1 NX, 2 NEX)" version=""`,
			Check: NotCalled(abi.FnSet)},
		{Name: "set empty key", Cmd: []string{"set", "", "v", "0", "0s", ""},
			Want: `set status=INVALID msg="set: empty key" version=""`},

		// del
		{Name: "del ok", Setup: func(h *abitest.Host) { h.Put("k\x00", []byte("v")) },
			Cmd: []string{"del", "k\x00", ""}, Want: `del status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Value("k\x00"); ok {
					t.Error("key still present")
				}
			}},
		{Name: "del not found", Cmd: []string{"del", "k", ""}, Want: `del status=NOT_FOUND msg="del \"k\": not found"`},
		{Name: "del fenced", Setup: func(h *abitest.Host) { h.Put("k", []byte("v")); LockL(h) },
			Cmd: []string{"del", "k", "L"}, Want: `del status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnDel); c.Del.Fence != "L" {
					t.Errorf("fence %q, want L", c.Del.Fence)
				}
			}},
		{Name: "del fence not held", Cmd: []string{"del", "k", "L"}, Want: `del status=LOCK_LOST msg="fence \"L\": lock not held"`},

		// vdel
		{Name: "vdel ok binary", Setup: func(h *abitest.Host) { h.Put("k", []byte(Binary)) },
			Cmd: []string{"vdel", "k", Binary, ""}, Want: `vdel status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Value("k"); ok {
					t.Error("key still present")
				}
			}},
		{Name: "vdel not found", Cmd: []string{"vdel", "k", "v", ""}, Want: `vdel status=NOT_FOUND msg="vdel \"k\": not found"`},
		{Name: "vdel not applied", Setup: func(h *abitest.Host) { h.Put("k", []byte("other")) },
			Cmd: []string{"vdel", "k", "v", ""}, Want: `vdel status=NOT_APPLIED msg="vdel \"k\": value differs"`},
		{Name: "vdel fence not held", Setup: func(h *abitest.Host) { h.Put("k", []byte("v")) },
			Cmd: []string{"vdel", "k", "v", "L"}, Want: `vdel status=LOCK_LOST msg="fence \"L\": lock not held"`},

		// watch, unwatch
		{Name: "watch self", Cmd: []string{"watch", "w\xff", "self"}, Want: `watch status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if o, ok := h.Watches()["w\xff"]; !ok || !o.Self {
					t.Errorf("watches %v, want w\\xff with self", h.Watches())
				}
			}},
		{Name: "watch plain", Cmd: []string{"watch", "w", ""}, Want: `watch status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if o, ok := h.Watches()["w"]; !ok || o.Self {
					t.Errorf("watches %v, want w without self", h.Watches())
				}
			}},
		{Name: "watch empty key", Cmd: []string{"watch", "", ""}, Want: `watch status=INVALID msg="watch: empty key"`},
		{Name: "unwatch not found", Cmd: []string{"unwatch", "w"}, Want: `unwatch status=NOT_FOUND msg="unwatch \"w\": not watched"`},

		// lock, unlock
		{Name: "lock ok", Cmd: []string{"lock", "L", "10s", "250ms"}, Want: `lock status=OK msg="" token="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnLock); c.TTL != 10*time.Second || c.Lock.Wait != 250*time.Millisecond {
					t.Errorf("ttl %v wait %v, want 10s 250ms", c.TTL, c.Lock.Wait)
				}
			}},
		{Name: "lock held returns token", Setup: LockL,
			Cmd: []string{"lock", "L", "10s", "0s"}, Want: `lock status=OK msg="" token="` + v(1) + `"`},
		{Name: "lock busy", Setup: func(h *abitest.Host) { h.Put("L", []byte("other holder")) },
			Cmd: []string{"lock", "L", "10s", "0s"}, Want: `lock status=BUSY msg="lock \"L\": held by another holder" token=""`},
		{Name: "lock zero ttl", Cmd: []string{"lock", "L", "0s", "0s"},
			Want: `lock status=INVALID msg="lock \"L\": ttl must be positive" token=""`},
		{Name: "lock negative wait", Cmd: []string{"lock", "L", "1s", "-1ms"},
			Want: `lock status=INVALID msg="lock \"L\": wait -1 ms out of range" token=""`, Check: NotCalled(abi.FnLock)},
		{Name: "unlock ok", Setup: LockL, Cmd: []string{"unlock", "L"}, Want: `unlock status=OK msg=""`},
		{Name: "unlock not found", Cmd: []string{"unlock", "L"}, Want: `unlock status=NOT_FOUND msg="unlock \"L\": not held"`},

		// log
		{Name: "log", Cmd: []string{"log", "8", "hello\x00\xff world"}, Want: `log status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if !slices.Contains(h.Logs(), abitest.LogLine{Level: abi.LevelError, Msg: "hello\x00\xff world"}) {
					t.Errorf("log line missing: %v", h.Logs())
				}
			}},
	}
	cases = append(cases, timerCases()...)

	// Every failure a Host can return reaches the rule as its status with
	// the Host's message, as an *abi.Error (no " untyped" in the report).
	for _, verb := range abi.Verbs() {
		args, ok := okArgs[verb]
		if !ok {
			continue // log cannot fail
		}
		for _, f := range abitest.Failures(verb) {
			cases = append(cases, VerbCase{
				Name:  verb + " " + f.Name,
				Setup: func(h *abitest.Host) { h.Fail(verb, f.Err) },
				Cmd:   args,
				Want:  fmt.Sprintf("%s status=%s msg=%q%s", verb, f.Status, f.Err.Error(), emptyResults[verb]),
			})
		}
	}
	return cases
}

// RunVerbCase runs one case on the rule s and its Host h, and returns the
// verb and status the rule reported.
func RunVerbCase(t *testing.T, tc VerbCase, s abi.Script, h *abitest.Host) (verb, status string) {
	t.Helper()
	if tc.Setup != nil {
		tc.Setup(h)
	}
	got := Run(t, s, h, Command(tc.Cmd[0], tc.Cmd[1:]...))
	if got != tc.Want {
		t.Errorf("report\n got %s\nwant %s", got, tc.Want)
	}
	if tc.Check != nil {
		tc.Check(t, h)
	}
	verb, rest, _ := strings.Cut(got, " status=")
	status, _, _ = strings.Cut(rest, " ")
	return verb, status
}

// RunVerbCases runs each case as a subtest on the rule and Host open
// returns for it (a Host as New returns it, but for what the rule's init
// did), then checks that together the cases saw each verb succeed and each
// verb but log return every status but OK and BUFFER_TOO_SMALL; the verbs
// of revision 3 are RunPatternCases'.
func RunVerbCases(t *testing.T, cases []VerbCase, open func(t *testing.T) (abi.Script, *abitest.Host)) {
	seen := map[string]map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			s, h := open(t)
			verb, st := RunVerbCase(t, tc, s, h)
			if seen[verb] == nil {
				seen[verb] = map[string]bool{}
			}
			seen[verb][st] = true
		})
	}
	if t.Failed() {
		return
	}
	for _, verb := range abi.Verbs() {
		if slices.Contains(patternVerbs, verb) {
			continue // RunPatternCases covers them
		}
		if !seen[verb]["OK"] {
			t.Errorf("verb %s: no OK case", verb)
		}
		if verb == abi.FnLog || verb == abi.FnNow {
			continue // they cannot fail
		}
		for _, st := range abi.Statuses() {
			if st != abi.StatusBufferTooSmall && st != abi.StatusOK && !seen[verb][st.String()] {
				t.Errorf("verb %s: status %s not covered", verb, st)
			}
		}
	}
}
