package assemblyscript

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// revision2Module is the test rule as committed before ABI revision 3
// (commit 3833770's testdata/verbs.wasm), frozen as revision1Module is.
const revision2Module = "testdata/verbs-r2.wasm"

// TestRevision2Module: a module built for revision 2 imports none of keys,
// watch_pattern and unwatch_pattern, loads on this runtime, and runs its
// verbs, timers included, as before; the SDK imports them only into a rule
// that calls them (testdata/verbs.wasm).
func TestRevision2Module(t *testing.T) {
	revision3 := []string{abi.FnKeys, abi.FnWatchPattern, abi.FnUnwatchPattern}
	src, err := os.ReadFile(revision2Module)
	if err != nil {
		t.Fatal(err)
	}
	imports := ssrunImports(t, src)
	for _, name := range revision3 {
		if slices.Contains(imports, name) {
			t.Fatalf("%s imports %s", revision2Module, name)
		}
	}
	if !slices.Contains(imports, abi.FnTimer) {
		t.Fatalf("%s imports %v: not a revision-2 module", revision2Module, imports)
	}
	current, err := os.ReadFile(filepath.Join("testdata", "verbs.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ssrunImports(t, current); !slices.Contains(got, abi.FnKeys) || !slices.Contains(got, abi.FnWatchPattern) || !slices.Contains(got, abi.FnUnwatchPattern) {
		t.Fatalf("testdata/verbs.wasm imports %v, want keys, watch_pattern and unwatch_pattern among them", got)
	}

	s, h := startFrozen(t, revision2Module, src)
	h.Put("k", []byte("v"))
	for _, tc := range []struct {
		ev   abi.Event
		want string
	}{
		{ruletest.Command("get", "k"), "get status=OK msg= value=x76 text=v version=" + abitest.Version(1)},
		{ruletest.Command("timer", "t", "1s", "0s", "p"), `timer status=OK msg=""`},
		{ruletest.Command("cancel", "absent"), `cancel status=NOT_FOUND msg="cancel \"absent\": no such timer"`},
		{abi.Event{Key: "event", Op: abi.OpTimer, Value: []byte("p"), Deadline: 1732000000123, Late: true},
			"event op=TIMER key=event value=x70 text=p version= resync=false deadline=1732000000123 late=true"},
	} {
		if got := ruletest.Run(t, s, h, tc.ev); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
	if got, ok := h.Timers()["t"]; !ok || got.Every != 0 || string(got.Payload) != "p" {
		t.Errorf("timer t %+v (armed %t), want one firing with payload p", got, ok)
	}
}
