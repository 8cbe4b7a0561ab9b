package plugin

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// v is the n-th version abitest hands out.
var v = abitest.Version

// verbCase runs one command in the test plugin against a fresh store.
type verbCase struct {
	name  string
	setup func(s *abitest.Host)
	cmd   []string // command and its arguments
	want  string   // the report line
	check func(t *testing.T, h *abitest.Host)
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
}

// emptyResults is how the plugin reports a failed verb's results.
var emptyResults = map[string]string{
	abi.FnGet:  ` value=nil version=""`,
	abi.FnSet:  ` version=""`,
	abi.FnLock: ` token=""`,
}

func notCalled(verb string) func(t *testing.T, h *abitest.Host) {
	return func(t *testing.T, h *abitest.Host) {
		if c, ok := h.LastCall(verb); ok {
			t.Errorf("host %s was called (%+v); the call should fail before reaching the host", verb, c)
		}
	}
}

func lock(s *abitest.Host) { _, _ = s.Lock(context.Background(), "L", time.Second, abi.LockOptions{}) }

func verbCases() []verbCase {
	big := make([]byte, 5<<20) // larger than gRPC's default 4 MiB message size
	_, _ = rand.Read(big)
	binary := "\x00\x01\xff\r\n"
	cases := []verbCase{
		// get
		{name: "get ok binary", setup: func(s *abitest.Host) { s.Put("k\x00\xff", []byte(binary)) },
			cmd:  []string{"get", "k\x00\xff"},
			want: `get status=OK msg="" value=x0001ff0d0a version="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnGet); !c.HasDeadline {
					t.Error("host get ran without the call's deadline")
				}
			}},
		{name: "get ok empty value", setup: func(s *abitest.Host) { s.Put("e", []byte{}) },
			cmd: []string{"get", "e"}, want: `get status=OK msg="" value=x version="` + v(1) + `"`},
		{name: "get ok 5 MiB", setup: func(s *abitest.Host) { s.Put("big", big) },
			cmd: []string{"get", "big"}, want: `get status=OK msg="" value=` + show(big) + ` version="` + v(1) + `"`},
		{name: "get not found", cmd: []string{"get", "absent"},
			want: `get status=NOT_FOUND msg="get \"absent\": not found" value=nil version=""`},
		{name: "get empty key", cmd: []string{"get", ""},
			want: `get status=INVALID msg="get: empty key" value=nil version=""`},
		{name: "get denied", setup: func(s *abitest.Host) { s.Deny = func(_, key string) bool { return key == "secret" } },
			cmd: []string{"get", "secret"}, want: `get status=DENIED msg="get \"secret\": not permitted" value=nil version=""`},

		// set
		{name: "set ok binary", cmd: []string{"set", "k\xff", binary, "0", "0s", ""},
			want: `set status=OK msg="" version="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if got, _ := h.Value("k\xff"); string(got) != binary {
					t.Errorf("stored %q, want %q", got, binary)
				}
				if c, _ := h.LastCall(abi.FnSet); c.Set != (abi.SetOptions{}) || !c.HasDeadline {
					t.Errorf("options %+v (deadline %t), want none with a deadline", c.Set, c.HasDeadline)
				}
			}},
		{name: "set ok empty value", cmd: []string{"set", "k", "", "0", "0s", ""},
			want: `set status=OK msg="" version="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Value == nil {
					t.Error("empty value reached the host as nil")
				}
			}},
		{name: "set ok 5 MiB", cmd: []string{"set", "big", string(big), "0", "0s", ""},
			want: `set status=OK msg="" version="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if got, _ := h.Value("big"); !bytes.Equal(got, big) {
					t.Errorf("stored %d bytes, not the 5 MiB value", len(got))
				}
			}},
		{name: "set ttl rounded up to ms", cmd: []string{"set", "k", "v", "0", "1500100us", ""},
			want: `set status=OK msg="" version="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.TTL != 1501*time.Millisecond {
					t.Errorf("ttl %v, want 1.501s", c.Set.TTL)
				}
			}},
		{name: "set nx not applied", setup: func(s *abitest.Host) { s.Put("k", []byte("old")) },
			cmd:  []string{"set", "k", "new", "1", "0s", ""},
			want: `set status=NOT_APPLIED msg="set \"k\": not applied" version="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.Cond != abi.CondNX {
					t.Errorf("cond %v, want NX", c.Set.Cond)
				}
			}},
		{name: "set nx applied", cmd: []string{"set", "k", "new", "1", "0s", ""},
			want: `set status=OK msg="" version="` + v(1) + `"`},
		{name: "set nex equal", setup: func(s *abitest.Host) { s.Put("k", []byte("same")) },
			cmd: []string{"set", "k", "same", "2", "0s", ""}, want: `set status=OK msg="" version="` + v(2) + `"`},
		{name: "set nex differs", setup: func(s *abitest.Host) { s.Put("k", []byte("old")) },
			cmd: []string{"set", "k", "new", "2", "0s", ""}, want: `set status=NOT_APPLIED msg="set \"k\": not applied" version="` + v(1) + `"`},
		{name: "set fenced by held lock", setup: lock,
			cmd:  []string{"set", "k", "v", "0", "0s", "L"},
			want: `set status=OK msg="" version="` + v(2) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.Fence != "L" {
					t.Errorf("fence %q, want L", c.Set.Fence)
				}
			}},
		{name: "set fence not held", cmd: []string{"set", "k", "v", "0", "0s", "L"},
			want: `set status=LOCK_LOST msg="fence \"L\": lock not held" version=""`},
		{name: "set negative ttl", cmd: []string{"set", "k", "v", "0", "-1s", ""},
			want: `set status=INVALID msg="set \"k\": ttl -1000 ms out of range" version=""`, check: notCalled(abi.FnSet)},
		{name: "set negative sub-ms ttl", cmd: []string{"set", "k", "v", "0", "-1us", ""},
			want: `set status=INVALID msg="set \"k\": ttl -1 ms out of range" version=""`, check: notCalled(abi.FnSet)},
		{name: "set unknown condition", cmd: []string{"set", "k", "v", "7", "0s", ""},
			want:  `set status=INVALID msg="set \"k\": unknown condition 7 (want 0 none, 1 NX, 2 NEX)" version=""`,
			check: notCalled(abi.FnSet)},
		{name: "set empty key", cmd: []string{"set", "", "v", "0", "0s", ""},
			want: `set status=INVALID msg="set: empty key" version=""`},

		// del
		{name: "del ok", setup: func(s *abitest.Host) { s.Put("k\x00", []byte("v")) },
			cmd: []string{"del", "k\x00", ""}, want: `del status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Value("k\x00"); ok {
					t.Error("key still present")
				}
			}},
		{name: "del not found", cmd: []string{"del", "k", ""}, want: `del status=NOT_FOUND msg="del \"k\": not found"`},
		{name: "del fenced", setup: func(s *abitest.Host) { s.Put("k", []byte("v")); lock(s) },
			cmd: []string{"del", "k", "L"}, want: `del status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnDel); c.Del.Fence != "L" {
					t.Errorf("fence %q, want L", c.Del.Fence)
				}
			}},
		{name: "del fence not held", cmd: []string{"del", "k", "L"}, want: `del status=LOCK_LOST msg="fence \"L\": lock not held"`},

		// vdel
		{name: "vdel ok binary", setup: func(s *abitest.Host) { s.Put("k", []byte(binary)) },
			cmd: []string{"vdel", "k", binary, ""}, want: `vdel status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Value("k"); ok {
					t.Error("key still present")
				}
			}},
		{name: "vdel empty value", setup: func(s *abitest.Host) { s.Put("k", []byte{}) },
			cmd: []string{"vdel", "k", "", ""}, want: `vdel status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnVDel); c.Value == nil {
					t.Error("empty value reached the host as nil")
				}
			}},
		{name: "vdel not found", cmd: []string{"vdel", "k", "v", ""}, want: `vdel status=NOT_FOUND msg="vdel \"k\": not found"`},
		{name: "vdel not applied", setup: func(s *abitest.Host) { s.Put("k", []byte("other")) },
			cmd: []string{"vdel", "k", "v", ""}, want: `vdel status=NOT_APPLIED msg="vdel \"k\": value differs"`},
		{name: "vdel fenced", setup: func(s *abitest.Host) { s.Put("k", []byte("v")); lock(s) },
			cmd: []string{"vdel", "k", "v", "L"}, want: `vdel status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnVDel); c.Del.Fence != "L" {
					t.Errorf("fence %q, want L", c.Del.Fence)
				}
			}},
		{name: "vdel fence not held", setup: func(s *abitest.Host) { s.Put("k", []byte("v")) },
			cmd: []string{"vdel", "k", "v", "L"}, want: `vdel status=LOCK_LOST msg="fence \"L\": lock not held"`},

		// watch, unwatch
		{name: "watch self", cmd: []string{"watch", "w\xff", "self"}, want: `watch status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if o, ok := h.Watches()["w\xff"]; !ok || !o.Self {
					t.Errorf("watches %v, want w\\xff with self", h.Watches())
				}
			}},
		{name: "watch plain", cmd: []string{"watch", "w", ""}, want: `watch status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if o, ok := h.Watches()["w"]; !ok || o.Self {
					t.Errorf("watches %v, want w without self", h.Watches())
				}
			}},
		{name: "watch empty key", cmd: []string{"watch", "", ""}, want: `watch status=INVALID msg="watch: empty key"`},
		{name: "unwatch ok", setup: func(s *abitest.Host) { _ = s.Watch(context.Background(), "w", abi.WatchOptions{}) },
			cmd: []string{"unwatch", "w"}, want: `unwatch status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Watches()["w"]; ok {
					t.Error("still watched")
				}
			}},
		{name: "unwatch not found", cmd: []string{"unwatch", "w"}, want: `unwatch status=NOT_FOUND msg="unwatch \"w\": not watched"`},

		// lock, unlock
		{name: "lock ok", cmd: []string{"lock", "L", "10s", "250ms"}, want: `lock status=OK msg="" token="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnLock); c.TTL != 10*time.Second || c.Lock.Wait != 250*time.Millisecond {
					t.Errorf("ttl %v wait %v, want 10s 250ms", c.TTL, c.Lock.Wait)
				}
			}},
		{name: "lock held returns token", setup: lock,
			cmd: []string{"lock", "L", "10s", "0s"}, want: `lock status=OK msg="" token="` + v(1) + `"`},
		{name: "lock busy", setup: func(s *abitest.Host) { s.Put("L", []byte("other holder")) },
			cmd: []string{"lock", "L", "10s", "0s"}, want: `lock status=BUSY msg="lock \"L\": held by another holder" token=""`},
		{name: "lock zero ttl", cmd: []string{"lock", "L", "0s", "0s"},
			want: `lock status=INVALID msg="lock \"L\": ttl must be positive" token=""`},
		{name: "lock sub-ms ttl rounded up", cmd: []string{"lock", "L", "1us", "0s"}, want: `lock status=OK msg="" token="` + v(1) + `"`,
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnLock); c.TTL != time.Millisecond {
					t.Errorf("ttl %v, want 1ms", c.TTL)
				}
			}},
		{name: "lock negative ttl", cmd: []string{"lock", "L", "-1s", "0s"},
			want: `lock status=INVALID msg="lock \"L\": ttl -1000 ms out of range" token=""`, check: notCalled(abi.FnLock)},
		{name: "lock negative wait", cmd: []string{"lock", "L", "1s", "-1ms"},
			want: `lock status=INVALID msg="lock \"L\": wait -1 ms out of range" token=""`, check: notCalled(abi.FnLock)},
		{name: "unlock ok", setup: lock, cmd: []string{"unlock", "L"}, want: `unlock status=OK msg=""`},
		{name: "unlock not found", cmd: []string{"unlock", "L"}, want: `unlock status=NOT_FOUND msg="unlock \"L\": not held"`},

		// log
		{name: "log", cmd: []string{"log", "8", "hello\x00\xff world"}, want: `log status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if !slices.Contains(h.Logs(), abitest.LogLine{Level: abi.LevelError, Msg: "hello\x00\xff world"}) {
					t.Errorf("log line missing: %v", h.Logs())
				}
			}},
		{name: "log custom level", cmd: []string{"log", "-2", "x"}, want: `log status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if !slices.Contains(h.Logs(), abitest.LogLine{Level: -2, Msg: "x"}) {
					t.Errorf("log line missing: %v", h.Logs())
				}
			}},
	}

	// Every failure status a Host can return reaches the plugin as that
	// status with the Host's message, as an *abi.Error.
	for _, verb := range abi.Verbs {
		args, ok := okArgs[verb]
		if !ok {
			continue // log cannot fail
		}
		for _, f := range abitest.Failures(verb) {
			cases = append(cases, verbCase{
				name:  verb + " " + f.Name,
				setup: func(h *abitest.Host) { h.Fail(verb, f.Err) },
				cmd:   args,
				want:  fmt.Sprintf("%s status=%s msg=%q%s", verb, f.Status, f.Err.Error(), emptyResults[verb]),
			})
		}
	}
	return cases
}

// TestVerbs proves every verb is wired from the Go SDK through gRPC and the
// host's callback service to abi.Host: arguments (binary-safe, large),
// options, results, every status and its message, and the call's deadline.
// One plugin process serves every case; the store is reset in between.
func TestVerbs(t *testing.T) {
	h := abitest.New()
	s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 10 * time.Second})
	seen := map[string]map[string]bool{}
	for _, tc := range verbCases() {
		t.Run(tc.name, func(t *testing.T) {
			h.Reset()
			if tc.setup != nil {
				tc.setup(h)
			}
			got := run(t, s, h, command(tc.cmd[0], tc.cmd[1:]...))
			if got != tc.want {
				t.Errorf("report\n got %s\nwant %s", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, h)
			}
			verb, rest, _ := strings.Cut(got, " status=")
			st, _, _ := strings.Cut(rest, " ")
			if seen[verb] == nil {
				seen[verb] = map[string]bool{}
			}
			seen[verb][st] = true
		})
	}
	if t.Failed() {
		return
	}
	// Coverage: each verb succeeded, and each non-OK status a verb can
	// return was seen.
	for _, verb := range abi.Verbs {
		if !seen[verb]["OK"] {
			t.Errorf("verb %s: no OK case", verb)
		}
		if verb == abi.FnLog {
			continue
		}
		for _, st := range abi.Statuses() {
			if st != abi.StatusBufferTooSmall && st != abi.StatusOK && !seen[verb][st.String()] {
				t.Errorf("verb %s: status %s not covered", verb, st)
			}
		}
	}
}

// TestHostServiceIsABI checks that the Host service has exactly one method
// per ABI verb.
func TestHostServiceIsABI(t *testing.T) {
	var got []string
	for _, m := range pb.Host_ServiceDesc.Methods {
		got = append(got, strings.ToLower(m.MethodName))
	}
	if !slices.Equal(got, abi.Verbs) {
		t.Fatalf("Host service methods %v, abi.Verbs %v", got, abi.Verbs)
	}
}

// TestEventDelivery checks the event reaches the Go handler intact.
func TestEventDelivery(t *testing.T) {
	h := abitest.New()
	s, _, _ := ruleScript(t, h, abi.Limits{})
	big := bytes.Repeat([]byte{0, 0xff, '\n'}, 2<<20)
	for _, ev := range []abi.Event{
		{Key: "event", Op: abi.OpSet, Value: []byte("\x00v\xff"), Version: "001732000000000:00001:StateStore"},
		{Key: "event", Op: abi.OpSet, Value: []byte{}, Version: "v", Resync: true},
		{Key: "event", Op: abi.OpSet, Value: big},
		{Key: "event", Op: abi.OpDelete, Version: "v2"},
		{Key: "event", Op: abi.OpLockLost},
	} {
		want := fmt.Sprintf("event status=OK msg=\"\" op=%s value=%s version=%q resync=%t", ev.Op, show(ev.Value), ev.Version, ev.Resync)
		if got := run(t, s, h, ev); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
	err := s.Handle(context.Background(), abi.Event{Key: "event", Op: "RENAME"})
	if e := wantError(t, err, callHandle, abi.ErrCrashed); !strings.Contains(e.Msg, `unknown op "RENAME"`) {
		t.Errorf("unknown op: %v", err)
	}
}
