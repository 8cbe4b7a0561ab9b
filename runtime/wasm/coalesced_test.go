package wasm

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// A guest that exports ssrun_event_coalesced gets the coalesced count in
// its event record; one that does not (every guest built before it) gets
// the record it always got, which its decoder accepts.
func TestCoalescedOnlyToGuestsThatDecodeIt(t *testing.T) {
	r := sharedRuntime(t)
	ev := abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "1:2:x", Coalesced: 41}
	plain := ev
	plain.Coalesced = 0
	optIn := handGuest(nil).withFunc(wFunc{export: abi.ExportCoalesced, results: []api.ValueType{i32}, body: i32c(1)})
	for _, tc := range []struct {
		name   string
		module wModule
		want   abi.Event
	}{
		{"without the export", handGuest(nil), plain},
		{"with the export", optIn, ev},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := start(t, compile(t, r, "hand.wasm", tc.module.bytes()), abitest.New(), abi.Limits{})
			if err := s.Handle(context.Background(), ev); err != nil {
				t.Fatalf("Handle: %v", err)
			}
			want := abi.AppendEvent(nil, tc.want)
			if got := (&handABI{t: t, s: s}).read(handAllocAt, uint32(len(want))); !bytes.Equal(got, want) {
				t.Fatalf("event record in guest memory %q, want %q", got, want)
			}
			got, err := abi.DecodeEvent(want)
			if err != nil || got.Coalesced != tc.want.Coalesced {
				t.Fatalf("decoded %+v, %v; want Coalesced %d", got, err, tc.want.Coalesced)
			}
		})
	}
	t.Run("wrong signature", func(t *testing.T) {
		bad := handGuest(nil).withFunc(wFunc{export: abi.ExportCoalesced, params: []api.ValueType{i32}, results: []api.ValueType{i32}, body: i32c(1)})
		_, err := r.Compile(context.Background(), "bad.wasm", bad.bytes())
		if err == nil || !strings.Contains(err.Error(), "export ssrun_event_coalesced has signature (i32) -> (i32); want () -> (i32)") {
			t.Fatalf("Compile: %v", err)
		}
	})
}
