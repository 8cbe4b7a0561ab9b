package plugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// v is the n-th version abitest hands out.
var v = abitest.Version

// largeVerbCases move values larger than gRPC's default 4 MiB message size
// in each direction: the SDK's Serve and the runtime lift the limit, so
// they run on the built plugin.
func largeVerbCases() []ruletest.VerbCase {
	big := make([]byte, 5<<20)
	_, _ = rand.Read(big)
	return []ruletest.VerbCase{
		{Name: "get ok 5 MiB", Setup: func(s *abitest.Host) { s.Put("big", big) },
			Cmd: []string{"get", "big"}, Want: `get status=OK msg="" value=` + ruletest.Show(big) + ` version="` + v(1) + `"`},
		{Name: "timer ok 5 MiB payload", Cmd: []string{"timer", "big", "1s", "0s", string(big)},
			Want: `timer status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if got := h.Timers()["big"].Payload; !bytes.Equal(got, big) {
					t.Errorf("armed a %d-byte payload, not the 5 MiB one", len(got))
				}
			}},
		{Name: "set ok 5 MiB", Cmd: []string{"set", "big", string(big), "0", "0s", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if got, _ := h.Value("big"); !bytes.Equal(got, big) {
					t.Errorf("stored %d bytes, not the 5 MiB value", len(got))
				}
			}},
	}
}

// maxDuration is the longest time.Duration, in milliseconds one more than
// the longest the ABI takes (wire.Millis rounds it up).
var maxDuration = time.Duration(math.MaxInt64).String()

// verbCases are the shared cases and those particular to plugins, but for
// largeVerbCases.
func verbCases() []ruletest.VerbCase {
	return append(ruletest.VerbCases(), []ruletest.VerbCase{
		{Name: "set ok binary", Cmd: []string{"set", "k\xff", ruletest.Binary, "0", "0s", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if got, _ := h.Value("k\xff"); string(got) != ruletest.Binary {
					t.Errorf("stored %q, want %q", got, ruletest.Binary)
				}
				if c, _ := h.LastCall(abi.FnSet); c.Set != (abi.SetOptions{}) || !c.HasDeadline {
					t.Errorf("options %+v (deadline %t), want none with a deadline", c.Set, c.HasDeadline)
				}
			}},
		{Name: "set ok empty value", Cmd: []string{"set", "k", "", "0", "0s", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Value == nil {
					t.Error("empty value reached the host as nil")
				}
			}},
		{Name: "set negative sub-ms ttl", Cmd: []string{"set", "k", "v", "0", "-1us", ""},
			Want: `set status=INVALID msg="set \"k\": ttl -1 ms out of range" version=""`, Check: ruletest.NotCalled(abi.FnSet)},
		{Name: "vdel empty value", Setup: func(s *abitest.Host) { s.Put("k", []byte{}) },
			Cmd: []string{"vdel", "k", "", ""}, Want: `vdel status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnVDel); c.Value == nil {
					t.Error("empty value reached the host as nil")
				}
			}},
		{Name: "vdel fenced", Setup: func(s *abitest.Host) { s.Put("k", []byte("v")); ruletest.LockL(s) },
			Cmd: []string{"vdel", "k", "v", "L"}, Want: `vdel status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnVDel); c.Del.Fence != "L" {
					t.Errorf("fence %q, want L", c.Del.Fence)
				}
			}},
		{Name: "unwatch ok", Setup: func(s *abitest.Host) { _ = s.Watch(context.Background(), "w", abi.WatchOptions{}) },
			Cmd: []string{"unwatch", "w"}, Want: `unwatch status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Watches()["w"]; ok {
					t.Error("still watched")
				}
			}},
		{Name: "lock sub-ms ttl rounded up", Cmd: []string{"lock", "L", "1us", "0s"}, Want: `lock status=OK msg="" token="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnLock); c.TTL != time.Millisecond {
					t.Errorf("ttl %v, want 1ms", c.TTL)
				}
			}},
		{Name: "lock negative ttl", Cmd: []string{"lock", "L", "-1s", "0s"},
			Want: `lock status=INVALID msg="lock \"L\": ttl -1000 ms out of range" token=""`, Check: ruletest.NotCalled(abi.FnLock)},
		{Name: "timer sub-ms rounded up, with a deadline", Cmd: []string{"timer", "t", "1us", "1us", "p"}, Want: `timer status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnTimer); c.Delay != time.Millisecond || c.Timer.Every != time.Millisecond || !c.HasDeadline {
					t.Errorf("delay %v, every %v (deadline %t), want 1ms, 1ms with a deadline", c.Delay, c.Timer.Every, c.HasDeadline)
				}
			}},
		{Name: "timer negative every", Cmd: []string{"timer", "t", "1s", "-1ms", ""},
			Want: `timer status=INVALID msg="timer \"t\": negative delay or period"`, Check: ruletest.NotCalled(abi.FnTimer)},
		{Name: "timer negative sub-ms delay", Cmd: []string{"timer", "t", "-1us", "0s", ""},
			Want: `timer status=INVALID msg="timer \"t\": negative delay or period"`, Check: ruletest.NotCalled(abi.FnTimer)},
		{Name: "timer delay beyond a Duration", Cmd: []string{"timer", "t", maxDuration, "0s", ""},
			Want: `timer status=INVALID msg="timer \"t\": delay 9223372036855 ms out of range"`, Check: ruletest.NotCalled(abi.FnTimer)},
		{Name: "timer every beyond a Duration", Cmd: []string{"timer", "t", "0s", maxDuration, ""},
			Want: `timer status=INVALID msg="timer \"t\": every 9223372036855 ms out of range"`, Check: ruletest.NotCalled(abi.FnTimer)},
		{Name: "cancel binary name", Setup: func(h *abitest.Host) { _ = h.Timer(context.Background(), "t\x00\xff", time.Hour, abi.TimerOptions{}) },
			Cmd: []string{"cancel", "t\x00\xff"}, Want: `cancel status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnCancel); c.Key != "t\x00\xff" || !c.HasDeadline {
					t.Errorf("cancel %q (deadline %t), want the binary name with a deadline", c.Key, c.HasDeadline)
				}
			}},
		{Name: "log custom level", Cmd: []string{"log", "-2", "x"}, Want: `log status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if !slices.Contains(h.Logs(), abitest.LogLine{Level: -2, Msg: "x"}) {
					t.Errorf("log line missing: %v", h.Logs())
				}
			}},
	}...)
}

// TestVerbs proves every verb is wired from the Go SDK through gRPC and the
// host's callback service to abi.Host: arguments (binary-safe), options,
// results, every status and its message (as an *abi.Error), and the call's
// deadline; both ways a plugin may take: its session, and Handle calls
// with the Host service (a plugin that predates the session). One rule,
// served in-process, serves every case of each; the store is reset in
// between.
func TestVerbs(t *testing.T) {
	for _, unary := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "unary"}[unary], func(t *testing.T) {
			h := abitest.New()
			s := inProcessScriptWith(t, h, unary)
			ruletest.RunVerbCases(t, verbCases(), func(*testing.T) (abi.Script, *abitest.Host) {
				h.Reset()
				return s, h
			})
		})
	}
}

// TestLargeMessages: values and events larger than gRPC's default 4 MiB
// message size cross between a plugin process and the host both ways.
func TestLargeMessages(t *testing.T) {
	h := abitest.New()
	s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 10 * time.Second})
	for _, tc := range largeVerbCases() {
		t.Run(tc.Name, func(t *testing.T) {
			h.Reset()
			ruletest.RunVerbCase(t, tc, s, h)
		})
	}
	value := bytes.Repeat([]byte{0, 0xff, '\n'}, 2<<20)
	checkEvents(t, s, h, []abi.Event{
		{Key: "event", Op: abi.OpSet, Value: value},
		{Key: "event", Op: abi.OpTimer, Value: value, Deadline: 1732000000123, Late: true},
	})
}

// TestHostServiceIsABI checks that the Host service has exactly one method
// per ABI verb.
func TestHostServiceIsABI(t *testing.T) {
	var got []string
	for _, m := range pb.Host_ServiceDesc.Methods {
		got = append(got, camelToSnake(m.MethodName))
	}
	if want := allVerbs(); !slices.Equal(got, want) {
		t.Fatalf("Host service methods %v, ABI verbs %v", got, want)
	}
}

// TestEventDelivery checks the event reaches the Go handler intact (the
// 6 MiB one: TestLargeMessages).
func TestEventDelivery(t *testing.T) {
	h := abitest.New()
	s, _, _ := inProcessScript(t, h, abi.Limits{})
	checkEvents(t, s, h, ruletest.Events(bytes.Repeat([]byte{0, 0xff, '\n'}, 64<<10)))
	err := s.Handle(context.Background(), abi.Event{Key: "event", Op: "RENAME"})
	if e := wantError(t, err, callHandle, abi.ErrCrashed); !strings.Contains(e.Msg, `unknown op "RENAME"`) {
		t.Errorf("unknown op: %v", err)
	}
}

// checkEvents sends each event to the test rule and checks that it reports
// the event as sent.
func checkEvents(t *testing.T, s *script, h *abitest.Host, evs []abi.Event) {
	t.Helper()
	for _, ev := range evs {
		want := ruletest.EventReport(ev)
		if got := run(t, s, h, ev); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
