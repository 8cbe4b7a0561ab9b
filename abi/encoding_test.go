package abi

import (
	"bytes"
	"errors"
	"testing"
)

func TestEventRoundTrip(t *testing.T) {
	for _, ev := range []Event{
		{Key: "thermostat1/setPoint", Op: OpSet, Value: []byte("21.5"), Version: "001732000000000:00001:StateStore"},
		{Key: "k", Op: OpSet, Value: []byte{}, Version: "v"},
		{Key: "k\x00\r\n", Op: OpDelete, Version: "001732000000000:00002:StateStore", Resync: true},
		{Key: "lock", Op: OpLockLost},
		{Key: "door", Op: OpTimer, Value: []byte("open-too-long"), Deadline: 1_795_000_000_123},
		{Key: "tick", Op: OpTimer, Value: []byte{}, Deadline: 1, Late: true},
		{Key: "k", Op: OpSet, Value: []byte("v"), Version: "v", Coalesced: 999_999},
		{Key: "k", Op: OpDelete, Version: "v", Resync: true, Coalesced: 1},
	} {
		b := AppendEvent(nil, ev)
		if len(b) != EventSize(ev) {
			t.Errorf("EventSize = %d, encoded %d", EventSize(ev), len(b))
		}
		got, err := DecodeEvent(b)
		if err != nil {
			t.Fatalf("DecodeEvent(%+v): %v", ev, err)
		}
		if got.Key != ev.Key || got.Op != ev.Op || !bytes.Equal(got.Value, ev.Value) || got.Version != ev.Version || got.Resync != ev.Resync ||
			got.Deadline != ev.Deadline || got.Late != ev.Late || got.Coalesced != ev.Coalesced {
			t.Fatalf("round trip: got %+v, want %+v", got, ev)
		}
		if ev.Op == OpSet && got.Value == nil {
			t.Fatalf("empty SET value decoded as nil")
		}
	}
}

func TestDecodeEventRejects(t *testing.T) {
	good := AppendEvent(nil, Event{Key: "k", Op: OpSet, Value: []byte("v"), Version: "1:0:n"})
	withValue := AppendEvent(nil, Event{Key: "k", Op: OpSet, Value: []byte("v")})
	withValue[0] = opCodeDelete
	timer := AppendEvent(nil, Event{Key: "t", Op: OpTimer, Value: []byte("p"), Deadline: 42})
	lateSet := append([]byte{}, good...)
	lateSet[1] = flagLate
	coalesced := AppendEvent(nil, Event{Key: "k", Op: OpSet, Value: []byte("v"), Coalesced: 3})
	coalescedTimer := append([]byte{}, timer...)
	coalescedTimer[1] = flagCoalesced
	coalescedTimer = append(coalescedTimer, 3, 0, 0, 0)
	cases := map[string][]byte{
		"coalesced without count": coalesced[:len(coalesced)-4],
		"coalesced short count":   coalesced[:len(coalesced)-1],
		"coalesced on a TIMER":    coalescedTimer,
		"empty":                   nil,
		"short header":            good[:3],
		"unknown op":              append([]byte{9}, good[1:]...),
		"reserved flags":          append([]byte{good[0], 2}, good[2:]...),
		"truncated":               good[:len(good)-1],
		"trailing":                append(append([]byte{}, good...), 0),
		"huge length":             append(append([]byte{}, good[:4]...), 0xff, 0xff, 0xff, 0xff),
		"delete value":            withValue,
		"timer without deadline":  timer[:len(timer)-8],
		"timer short deadline":    timer[:len(timer)-1],
		"late on a SET":           lateSet,
	}
	for name, b := range cases {
		if ev, err := DecodeEvent(b); !errors.Is(err, ErrEncoding) {
			t.Errorf("%s: DecodeEvent = %+v, %v; want ErrEncoding", name, ev, err)
		}
	}
}

// An event that coalesced nothing, and a coalesced count on an op that
// cannot coalesce, encode as before coalescing existed: byte for byte what
// a guest built before it decodes.
func TestCoalescedEncodingOnlyWhenSet(t *testing.T) {
	for _, ev := range []Event{
		{Key: "k", Op: OpSet, Value: []byte("v"), Version: "1"},
		{Key: "t", Op: OpTimer, Value: []byte("p"), Deadline: 5, Coalesced: 7},
		{Key: "l", Op: OpLockLost, Coalesced: 2},
	} {
		b := AppendEvent(nil, ev)
		if b[1]&flagCoalesced != 0 {
			t.Errorf("%s: coalesced flag set", ev.Op)
		}
		plain := ev
		plain.Coalesced = 0
		if !bytes.Equal(b, AppendEvent(nil, plain)) {
			t.Errorf("%s: record differs from the one without Coalesced", ev.Op)
		}
	}
}

func TestStatusNames(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Statuses() {
		name := s.String()
		if name == "" || seen[name] {
			t.Fatalf("status %d has empty or duplicate name %q", s, name)
		}
		seen[name] = true
		back, ok := ParseStatus(name)
		if !ok || back != s {
			t.Fatalf("ParseStatus(%q) = %v, %v", name, back, ok)
		}
	}
	if Status(99).String() != "STATUS_99" {
		t.Fatalf("unknown status name %q", Status(99).String())
	}
}

func TestStatusOf(t *testing.T) {
	if StatusOf(nil) != StatusOK {
		t.Fatal("nil error is not OK")
	}
	if s := StatusOf(Errorf(StatusDenied, "set %q: denied", "k")); s != StatusDenied {
		t.Fatalf("StatusOf(*Error) = %v", s)
	}
	wrapped := errors.Join(errors.New("x"), Errorf(StatusFenced, "f"))
	if s := StatusOf(wrapped); s != StatusFenced {
		t.Fatalf("StatusOf(wrapped) = %v", s)
	}
	if s := StatusOf(errors.New("boom")); s != StatusInternal {
		t.Fatalf("StatusOf(plain) = %v", s)
	}
}

func FuzzDecodeEvent(f *testing.F) {
	f.Add(AppendEvent(nil, Event{Key: "k", Op: OpSet, Value: []byte("v"), Version: "1:0:n"}))
	f.Add(AppendEvent(nil, Event{Key: "k", Op: OpDelete, Resync: true}))
	f.Add([]byte{1, 0, 0, 0, 255, 255, 255, 255})
	f.Add(AppendEvent(nil, Event{Key: "t", Op: OpTimer, Value: []byte("p"), Deadline: 1_795_000_000_000, Late: true}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := DecodeEvent(b)
		if err != nil {
			if !errors.Is(err, ErrEncoding) {
				t.Fatalf("error does not wrap ErrEncoding: %v", err)
			}
			return
		}
		if enc := AppendEvent(nil, ev); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoded %x, input %x", enc, b)
		}
	})
}
