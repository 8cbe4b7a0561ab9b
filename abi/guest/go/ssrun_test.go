package ssrun

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// TestOptionsCount: at most one options value, checked before any host call.
func TestOptionsCount(t *testing.T) {
	_, err := Set("k", nil, SetOptions{}, SetOptions{})
	if StatusOf(err) != StatusInvalid || err.Error() != `set "k": 2 options values, want at most one` {
		t.Fatalf("Set with two options: %v", err)
	}
	if err := Watch("k", WatchOptions{}, WatchOptions{}, WatchOptions{}); StatusOf(err) != StatusInvalid {
		t.Fatalf("Watch with three options: %v", err)
	}
	if err := Timer("t", time.Second, TimerOptions{}, TimerOptions{}); StatusOf(err) != StatusInvalid || err.Error() != `timer "t": 2 options values, want at most one` {
		t.Fatalf("Timer with two options: %v", err)
	}
	if _, err := Keys("k/*", KeysOptions{}, KeysOptions{}); StatusOf(err) != StatusInvalid || err.Error() != `keys "k/*": 2 options values, want at most one` {
		t.Fatalf("Keys with two options: %v", err)
	}
	if err := WatchPattern("k/*", WatchOptions{}, WatchOptions{}); StatusOf(err) != StatusInvalid || err.Error() != `watch_pattern "k/*": 2 options values, want at most one` {
		t.Fatalf("WatchPattern with two options: %v", err)
	}
}

func TestMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0},
		{time.Nanosecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{1500 * time.Millisecond, 1500},
		{-time.Nanosecond, -1},
		{-time.Second, -1000},
		{time.Duration(1<<63 - 1), (1<<63-1)/int64(time.Millisecond) + 1},
	} {
		if got := millis(tc.d); got != tc.want {
			t.Errorf("millis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// withHandler runs fn with the package handler set to h.
func withHandler(h func(Event) error, fn func()) {
	old := handler
	handler = h
	defer func() { handler = old }()
	fn()
}

func TestDispatch(t *testing.T) {
	rec := abi.AppendEvent(nil, abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "1"})
	cases := []struct {
		name    string
		handler func(Event) error
		rec     []byte
		rc      int32
		log     string // prefix of the error log line; "" = none
	}{
		{"ok", func(ev Event) error {
			if ev.Key != "k" || string(ev.Value) != "v" || ev.Version != "1" || ev.Op != OpSet {
				return errors.New("wrong event")
			}
			return nil
		}, rec, 0, ""},
		{"no handler", nil, rec, -1, "ssrun: no handler: call ssrun.Handle in init"},
		{"bad record", func(Event) error { return nil }, rec[:5], -1, "ssrun: event key: abi: malformed record"},
		{"plain error", func(Event) error { return errors.New("nope") }, rec, -1, "handler: nope"},
		{"abi error", func(Event) error { return abi.Errorf(abi.StatusDenied, "set %q: denied", "x") }, rec, int32(abi.StatusDenied), `handler: set "x": denied`},
		{"wrapped abi error", func(Event) error { return errors.Join(errors.New("ctx"), abi.Errorf(abi.StatusBusy, "busy")) }, rec, int32(abi.StatusBusy), "handler: ctx\nbusy"},
		{"panic", func(Event) error { panic("boom") }, rec, -1, "handler panic: boom\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var logs []string
			withHandler(tc.handler, func() {
				rc := dispatch(tc.rec, func(level int32, msg string) {
					if level != LevelError {
						t.Errorf("log level %d", level)
					}
					logs = append(logs, msg)
				})
				if rc != tc.rc {
					t.Errorf("rc %d, want %d", rc, tc.rc)
				}
			})
			if tc.log == "" && len(logs) != 0 || tc.log != "" && (len(logs) != 1 || !strings.HasPrefix(logs[0], tc.log)) {
				t.Errorf("logs %q, want one starting %q", logs, tc.log)
			}
		})
	}
}

// FuzzDispatch: the SDK's event path accepts exactly the records
// abi.DecodeEvent accepts, hands the handler the event they encode, and
// never panics.
func FuzzDispatch(f *testing.F) {
	f.Add(abi.AppendEvent(nil, abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "1:0:x"}))
	f.Add(abi.AppendEvent(nil, abi.Event{Key: "k\x00", Op: abi.OpDelete, Resync: true}))
	f.Add(abi.AppendEvent(nil, abi.Event{Key: "lock", Op: abi.OpLockLost}))
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, rec []byte) {
		var got *Event
		withHandler(func(ev Event) error { got = &ev; return nil }, func() {
			rc := dispatch(rec, func(int32, string) {})
			_, err := abi.DecodeEvent(rec)
			if (rc == 0) != (err == nil) || (rc == 0) != (got != nil) {
				t.Fatalf("rc %d, decode error %v, handler called %t", rc, err, got != nil)
			}
		})
		if got != nil && !bytes.Equal(abi.AppendEvent(nil, *got), rec) {
			t.Fatalf("event %+v does not re-encode to its record", *got)
		}
	})
}

// FuzzParseRecord: result records parse exactly when well-formed and
// round-trip.
func FuzzParseRecord(f *testing.F) {
	f.Add(abi.AppendField(abi.AppendField(nil, []byte("value")), []byte("1:0:x")))
	f.Add(abi.AppendField(nil, []byte("token")))
	f.Add([]byte{5, 0, 0, 0, 'a'})
	f.Fuzz(func(t *testing.T, rec []byte) {
		if v, err := parseValue(rec); err == nil {
			if !bytes.Equal(abi.AppendField(abi.AppendField(nil, v.Data), []byte(v.Version)), rec) {
				t.Fatalf("parseValue(%q) = %+v does not round-trip", rec, v)
			}
		} else if !errors.Is(err, abi.ErrEncoding) {
			t.Fatalf("parseValue error %v", err)
		}
		if s, err := parseText(rec); err == nil {
			if !bytes.Equal(abi.AppendField(nil, []byte(s)), rec) {
				t.Fatalf("parseText(%q) = %q does not round-trip", rec, s)
			}
		} else if !errors.Is(err, abi.ErrEncoding) {
			t.Fatalf("parseText error %v", err)
		}
	})
}

// A coalesced event reaches the handler with its count (the SDK exports
// ssrun_event_coalesced, so the host sends it).
func TestDispatchCoalesced(t *testing.T) {
	rec := abi.AppendEvent(nil, abi.Event{Key: "k", Op: abi.OpDelete, Version: "9", Coalesced: 12})
	var got Event
	withHandler(func(ev Event) error { got = ev; return nil }, func() {
		if rc := dispatch(rec, func(int32, string) {}); rc != 0 {
			t.Fatalf("dispatch = %d", rc)
		}
	})
	if got.Op != abi.OpDelete || got.Version != "9" || got.Coalesced != 12 {
		t.Fatalf("handler got %+v, want DELETE version 9 coalesced 12", got)
	}
}
