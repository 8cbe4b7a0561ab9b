package wire

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

func TestMillis(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{0, 0}, {time.Nanosecond, 1}, {time.Millisecond, 1}, {1500100 * time.Microsecond, 1501},
		{-time.Nanosecond, -1}, {-time.Second, -1000}, {math.MaxInt64, math.MaxInt64/int64(time.Millisecond) + 1},
	} {
		if got := Millis(tc.d); got != tc.want {
			t.Errorf("Millis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

func TestDuration(t *testing.T) {
	for _, tc := range []struct {
		ms   int64
		want time.Duration
		ok   bool
	}{
		{0, 0, true}, {1500, 1500 * time.Millisecond, true}, {-1, 0, false},
		{maxMs, time.Duration(maxMs) * time.Millisecond, true}, {maxMs + 1, 0, false},
	} {
		if got, ok := Duration(tc.ms); got != tc.want || ok != tc.ok {
			t.Errorf("Duration(%d) = %v, %t; want %v, %t", tc.ms, got, ok, tc.want, tc.ok)
		}
	}
}

func TestResultRoundTrip(t *testing.T) {
	if Err(Result(nil)) != nil || Err(nil) != nil {
		t.Fatal("OK did not round-trip to nil")
	}
	for _, in := range []error{
		abi.Errorf(abi.StatusNotFound, "get %q: not found", "k"),
		errors.New("plain"),
	} {
		var e *abi.Error
		if !errors.As(Err(Result(in)), &e) || e.Status != abi.StatusOf(in) || e.Msg != in.Error() {
			t.Errorf("%v: got %+v", in, e)
		}
	}
}

func TestEventRoundTrip(t *testing.T) {
	for _, ev := range []abi.Event{
		{Key: "k\x00\xff", Op: abi.OpSet, Value: []byte("v"), Version: "001732000000000:00001:StateStore", Resync: true},
		{Key: "k", Op: abi.OpSet, Value: []byte{}},
		{Key: "k", Op: abi.OpDelete, Version: "v", Coalesced: 7},
		{Key: "k", Op: abi.OpSet, Value: []byte("v"), Coalesced: 1_000_000},
		{Key: "L", Op: abi.OpLockLost},
		{Key: "t\x00", Op: abi.OpTimer, Value: []byte("p"), Deadline: 1732000000123, Late: true},
		{Key: "t", Op: abi.OpTimer, Value: []byte{}, Deadline: 1},
	} {
		e, ok := EventToPB(ev)
		if !ok {
			t.Fatalf("EventToPB(%+v) refused", ev)
		}
		got := EventFromPB(e)
		if got.Key != ev.Key || got.Op != ev.Op || string(got.Value) != string(ev.Value) || (got.Value == nil) != (ev.Value == nil) ||
			got.Version != ev.Version || got.Resync != ev.Resync || got.Deadline != ev.Deadline || got.Late != ev.Late ||
			got.Coalesced != ev.Coalesced {
			t.Errorf("round trip %+v -> %+v", ev, got)
		}
	}
	if _, ok := EventToPB(abi.Event{Key: "k", Op: "RENAME"}); ok {
		t.Error("unknown op accepted")
	}
	if got := EventFromPB(&pb.Event{Key: []byte("k"), Op: pb.Op(9)}); got.Op != "9" || got.Value != nil {
		t.Errorf("unknown op decoded as %+v", got)
	}
}

const maxMs = math.MaxInt64 / int64(time.Millisecond)
