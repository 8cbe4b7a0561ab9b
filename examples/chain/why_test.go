package chain_test

import (
	"context"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
)

// TestWhy asks the host why the siren sounds, after the user's door sensor
// opened the door of an armed house: alarm.lua wrote it, handling
// alarm/state, which door.lua wrote, handling the user's write of
// door/front.
func TestWhy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, user := startChain(t, ctx)
	set := func(key, value string) string {
		t.Helper()
		res, err := user.Set(ctx, []byte(key), []byte(value), protocol.SetOptions{})
		if err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
		return res.Version.String()
	}
	set("alarm/armed", "yes")
	if w, ok := h.Why("alarm/armed"); ok {
		t.Fatalf("Why(alarm/armed) = %+v: no rule wrote it", w)
	}
	door := set("door/front", "open")

	var w provenance.Write
	for {
		var ok bool
		if w, ok = h.Why("siren/garden"); ok {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("no rule wrote siren/garden")
		}
		time.Sleep(5 * time.Millisecond)
	}
	get := func(key string) string {
		t.Helper()
		res, err := user.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil || !res.Found {
			t.Fatalf("get %s: %v (found %t)", key, err, res.Found)
		}
		return res.Version.String()
	}
	siren, state := get("siren/garden"), get("alarm/state")

	if w.Key != "siren/garden" || w.Rule != "alarm.lua" || w.Op != "SET" || w.Value != "on" || w.ValueSize != 2 || w.Truncated || w.Version != siren {
		t.Errorf("write = %s %s %s %q (%d bytes, cut %t) at %s, want alarm.lua SET siren/garden \"on\" at %s",
			w.Rule, w.Op, w.Key, w.Value, w.ValueSize, w.Truncated, w.Version, siren)
	}
	if want := (provenance.Cause{Key: "alarm/state", Op: "SET", Version: state, Rule: "door.lua"}); w.Event != want {
		t.Errorf("event = %+v, want %+v", w.Event, want)
	}
	want := []provenance.Step{
		{Rule: "door.lua", Key: "alarm/state", Op: "SET", Version: state},
		{Rule: "alarm.lua", Key: "siren/garden", Op: "SET", Version: siren},
	}
	if len(w.Chain) != len(want) || w.Chain[0] != want[0] || w.Chain[1] != want[1] {
		t.Errorf("chain = %+v, want %+v", w.Chain, want)
	}
	if o := w.Origin; o == nil || *o != (provenance.Origin{Key: "door/front", Op: "SET", Version: door, Client: "chain-user"}) {
		t.Errorf("origin = %+v, want the user's (chain-user) SET of door/front at %s", o, door)
	}

	// door.lua's own write: handling the user's change, at the chain's start.
	ws, ok := h.Why("alarm/state")
	if !ok {
		t.Fatal("Why(alarm/state): no write recorded")
	}
	if want := (provenance.Cause{Key: "door/front", Op: "SET", Version: door, Client: "chain-user"}); ws.Event != want || len(ws.Chain) != 1 || ws.Chain[0].Rule != "door.lua" {
		t.Errorf("alarm/state: event %+v, chain %+v; want %+v and door.lua alone", ws.Event, ws.Chain, want)
	}
}
