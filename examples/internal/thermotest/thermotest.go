// Package thermotest is the end-to-end test table every thermostat example
// (Lua, Go WebAssembly, AssemblyScript) passes: the same rule behaviour in
// each language, checked through the real host on the embedded broker.
//
// The behaviour: the rule watches thermostat1/setPoint. A numeric set point
// (surrounding spaces allowed) is clamped into [16, 28]; the clamped value is
// written to hvac1/target and, when clamping changed it, back to
// thermostat1/setPoint (the rule is not woken by that write of its own).
// Numbers are written in their shortest form ("28", "21.5"). A value that is
// not a number leaves hvac1/target alone and sets thermostat1/error to
// `invalid set point "<value>"`; a valid one deletes thermostat1/error. When
// the set point is deleted, hvac1/target is deleted (HVAC off).
package thermotest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// Keys of the thermostat examples.
const (
	SetPoint = "thermostat1/setPoint"
	Target   = "hvac1/target"
	Error    = "thermostat1/error"
)

type step struct {
	name       string
	set        *string // SET the set point to this; nil = DEL it
	target     *string // expected hvac1/target; nil = absent
	setPoint   *string // expected set point afterwards; nil = absent
	errorValue *string // expected thermostat1/error; nil = absent
}

func s(v string) *string { return &v }

// Steps is the table, run in order on one store.
var steps = []step{
	{name: "in range", set: s("21.5"), target: s("21.5"), setPoint: s("21.5")},
	{name: "too hot is clamped and written back", set: s("30"), target: s("28"), setPoint: s("28")},
	{name: "too cold is clamped", set: s("5"), target: s("16"), setPoint: s("16")},
	{name: "bounds are kept", set: s("28"), target: s("28"), setPoint: s("28")},
	{name: "spaces are trimmed", set: s(" 22 "), target: s("22"), setPoint: s(" 22 ")},
	{name: "not a number is reported, target kept", set: s("warm"), target: s("22"), setPoint: s("warm"), errorValue: s(`invalid set point "warm"`)},
	{name: "a valid value clears the error", set: s("19.25"), target: s("19.25"), setPoint: s("19.25")},
	{name: "deleting the set point turns the HVAC off", set: nil, target: nil, setPoint: nil},
}

// Run loads the rule files in dir into a host on a fresh embedded broker,
// with the given runtimes, and plays the table.
func Run(t *testing.T, dir string, runtimes ...abi.Runtime) {
	t.Helper()
	// A guard against a hang: a cold compile of a Go WebAssembly guest
	// takes 0.5 s idle but past a minute under -race on 2 loaded cores.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	h, user := examplehost.Start(ctx, t, "thermotest", dir, runtimes...)
	if n := len(h.Status()); n != 1 {
		t.Fatalf("%s holds %d rules, want exactly one thermostat", dir, n)
	}
	rule := filepath.Base(h.Status()[0].Path)
	for i, st := range steps {
		// The rule's writes for a step are complete once its handler
		// returned (the handled count grows by one per step).
		before := h.Status()[0]
		if st.set != nil {
			if _, err := user.Set(ctx, []byte(SetPoint), []byte(*st.set), protocol.SetOptions{}); err != nil {
				t.Fatalf("step %d %q: set: %v", i, st.name, err)
			}
		} else if _, err := user.Del(ctx, []byte(SetPoint), protocol.DelOptions{}); err != nil {
			t.Fatalf("step %d %q: del: %v", i, st.name, err)
		}
		testutil.WaitFor(t, fmt.Sprintf("%s: step %d %q handled", rule, i, st.name), func() bool {
			now := h.Status()[0]
			return now.Handled+now.Failed > before.Handled+before.Failed
		})
		if now := h.Status()[0]; now.Failed > before.Failed {
			t.Fatalf("%s: step %d %q: the handler failed (see the log above)", rule, i, st.name)
		}
		for _, kv := range []struct {
			key  string
			want *string
		}{{Target, st.target}, {SetPoint, st.setPoint}, {Error, st.errorValue}} {
			res, err := user.Get(ctx, []byte(kv.key), protocol.CallOptions{})
			if err != nil {
				t.Fatalf("step %d %q: get %s: %v", i, st.name, kv.key, err)
			}
			switch {
			case kv.want == nil && res.Found:
				t.Errorf("%s: step %d %q: %s = %q, want absent", rule, i, st.name, kv.key, res.Value)
			case kv.want != nil && (!res.Found || string(res.Value) != *kv.want):
				t.Errorf("%s: step %d %q: %s = %q (found %v), want %q", rule, i, st.name, kv.key, res.Value, res.Found, *kv.want)
			}
		}
	}
	st := h.Status()[0]
	if st.Failed != 0 || st.Dropped != 0 {
		t.Errorf("%s: %d failed, %d dropped events", rule, st.Failed, st.Dropped)
	}
	if want := uint64(len(steps)); st.Handled != want {
		t.Errorf("%s handled %d events, want %d: its own write-backs must not wake it", rule, st.Handled, want)
	}
}
