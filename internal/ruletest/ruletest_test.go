package ruletest

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// inProcess is a rule that runs Dispatch in the test's process, with a
// deadline on each call as a runtime sets one.
type inProcess struct{ h abi.Host }

func (r inProcess) Handle(ctx context.Context, ev abi.Event) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return Dispatch(ctx, r.h, ev)
}

func (inProcess) Close(context.Context) error { return nil }

// TestDispatch checks that each shared command passes its arguments and
// options to the Host and reports the result in the documented format.
func TestDispatch(t *testing.T) {
	v := abitest.Version
	cases := []struct {
		name  string
		setup func(h *abitest.Host)
		cmd   []string
		want  string
		verb  string // when set, the Host's last call of verb is call
		call  abitest.Call
	}{
		{name: "get", setup: func(h *abitest.Host) { h.Put("k\x00", []byte(Binary)) }, cmd: []string{"get", "k\x00"},
			want: `get status=OK msg="" value=x0001ff0d0a version="` + v(1) + `"`,
			verb: abi.FnGet, call: abitest.Call{Key: "k\x00", HasDeadline: true}},
		{name: "get not found", cmd: []string{"get", "k"},
			want: `get status=NOT_FOUND msg="get \"k\": not found" value=nil version=""`},
		{name: "set", setup: LockL, cmd: []string{"set", "k", "", "2", "1500ms", "L"},
			want: `set status=OK msg="" version="` + v(2) + `"`,
			verb: abi.FnSet, call: abitest.Call{Key: "k", Value: []byte{}, HasDeadline: true,
				Set: abi.SetOptions{Cond: abi.CondNEX, TTL: 1500 * time.Millisecond, Fence: "L"}}},
		{name: "del", setup: func(h *abitest.Host) { h.Put("k", nil); LockL(h) }, cmd: []string{"del", "k", "L"},
			want: `del status=OK msg=""`, verb: abi.FnDel, call: abitest.Call{Key: "k", Del: abi.DelOptions{Fence: "L"}, HasDeadline: true}},
		{name: "vdel", setup: func(h *abitest.Host) { h.Put("k", []byte("other")) }, cmd: []string{"vdel", "k", "v", ""},
			want: `vdel status=NOT_APPLIED msg="vdel \"k\": value differs"`,
			verb: abi.FnVDel, call: abitest.Call{Key: "k", Value: []byte("v"), HasDeadline: true}},
		{name: "watch self", cmd: []string{"watch", "w", "self"}, want: `watch status=OK msg=""`,
			verb: abi.FnWatch, call: abitest.Call{Key: "w", Watch: abi.WatchOptions{Self: true}, HasDeadline: true}},
		{name: "watch plain", cmd: []string{"watch", "w", ""}, want: `watch status=OK msg=""`,
			verb: abi.FnWatch, call: abitest.Call{Key: "w", HasDeadline: true}},
		{name: "unwatch", cmd: []string{"unwatch", "w"}, want: `unwatch status=NOT_FOUND msg="unwatch \"w\": not watched"`,
			verb: abi.FnUnwatch, call: abitest.Call{Key: "w", HasDeadline: true}},
		{name: "lock", cmd: []string{"lock", "L", "10s", "250ms"}, want: `lock status=OK msg="" token="` + v(1) + `"`,
			verb: abi.FnLock, call: abitest.Call{Key: "L", TTL: 10 * time.Second, Lock: abi.LockOptions{Wait: 250 * time.Millisecond}, HasDeadline: true}},
		{name: "unlock", setup: LockL, cmd: []string{"unlock", "L"}, want: `unlock status=OK msg=""`,
			verb: abi.FnUnlock, call: abitest.Call{Key: "L", HasDeadline: true}},
		{name: "untyped error", setup: func(h *abitest.Host) { h.Fail(abi.FnUnlock, errors.New("plain")) }, cmd: []string{"unlock", "L"},
			want: `unlock status=INTERNAL msg="plain" untyped`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			if tc.setup != nil {
				tc.setup(h)
			}
			if got := Run(t, inProcess{h}, h, Command(tc.cmd[0], tc.cmd[1:]...)); got != tc.want {
				t.Errorf("report\n got %s\nwant %s", got, tc.want)
			}
			if tc.verb == "" {
				return
			}
			if got, _ := h.LastCall(tc.verb); !reflect.DeepEqual(got, tc.call) {
				t.Errorf("host %s got %+v, want %+v", tc.verb, got, tc.call)
			}
		})
	}
}

// TestDispatchLogLevel checks that log passes its level and message as
// given, before the report.
func TestDispatchLogLevel(t *testing.T) {
	h := abitest.New()
	Run(t, inProcess{h}, h, Command("log", "-2", "a\x00\xff"))
	want := []abitest.LogLine{{Level: -2, Msg: "a\x00\xff"}, {Level: abi.LevelInfo, Msg: `report log status=OK msg=""`}}
	if got := h.Logs(); !slices.Equal(got, want) {
		t.Errorf("logs %q, want %q", got, want)
	}
}

// TestDispatchNoReport: noop reports nothing; an unknown command is an
// error naming it.
func TestDispatchNoReport(t *testing.T) {
	h := abitest.New()
	if err := Dispatch(context.Background(), h, Command("noop")); err != nil {
		t.Fatalf("noop: %v", err)
	}
	err := Dispatch(context.Background(), h, Command("nosuch", "x"))
	if err == nil || err.Error() != `unknown command "nosuch"` {
		t.Errorf("unknown command: %v", err)
	}
	if logs := h.Logs(); len(logs) != 0 {
		t.Errorf("logged %v, want nothing", logs)
	}
}

func TestShow(t *testing.T) {
	for _, tc := range []struct {
		in   []byte
		want string
	}{
		{nil, "nil"},
		{[]byte{}, "x"},
		{[]byte{0, 0xff}, "x00ff"},
		{[]byte(strings.Repeat("a", 64)), "x" + strings.Repeat("61", 64)},
		{[]byte(strings.Repeat("a", 65)), "65B:635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0"},
	} {
		if got := Show(tc.in); got != tc.want {
			t.Errorf("Show(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// TestReports keeps only info-level lines with the prefix, without it.
func TestReports(t *testing.T) {
	h := abitest.New()
	h.Log(abi.LevelInfo, "report a")
	h.Log(abi.LevelWarn, "report warn")
	h.Log(abi.LevelInfo, "not a report")
	h.Log(abi.LevelInfo, "report b x=1")
	if got, want := Reports(h), []string{"a", "b x=1"}; !slices.Equal(got, want) {
		t.Errorf("Reports = %q, want %q", got, want)
	}
}

// TestArgs: Args undoes Command; events other than SET carry none; a
// malformed value panics.
func TestArgs(t *testing.T) {
	if got := Args(Command("c", "", "a\x00\xff", "")); !slices.Equal(got, []string{"", "a\x00\xff", ""}) {
		t.Errorf("Args = %q", got)
	}
	if got := Args(abi.Event{Key: "c", Op: abi.OpDelete, Value: []byte{1}}); got != nil {
		t.Errorf("Args of a DELETE = %q, want none", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("Args of a malformed value did not panic")
		}
	}()
	Args(abi.Event{Key: "c", Op: abi.OpSet, Value: []byte{0xff}})
}

// FuzzArgs: Args returns exactly the arguments Command packed.
func FuzzArgs(f *testing.F) {
	f.Add("", "")
	f.Add("a\x00\xff", strings.Repeat("x", 300))
	f.Fuzz(func(t *testing.T, a, b string) {
		if got := Args(Command("c", a, b)); !slices.Equal(got, []string{a, b}) {
			t.Fatalf("Args(Command(c, %q, %q)) = %q", a, b, got)
		}
	})
}
