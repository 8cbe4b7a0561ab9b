package assemblyscript

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tetratelabs/wazero"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// revision1Module is the test rule as committed before ABI revision 2
// (commit ec4ef4d, built from that commit's testdata/verbs.ts). It is
// frozen: rebuild-check.sh does not rebuild it, so it stays what users
// already run.
const revision1Module = "testdata/verbs-r1.wasm"

// ssrunImports lists the host functions a module imports from "ssrun".
func ssrunImports(t *testing.T, src []byte) []string {
	t.Helper()
	ctx := context.Background()
	r := wazero.NewRuntime(ctx)
	defer func() { _ = r.Close(ctx) }()
	cm, err := r.CompileModule(ctx, src)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, def := range cm.ImportedFunctions() {
		if mod, name, _ := def.Import(); mod == abi.ImportModule {
			out = append(out, name)
		}
	}
	return out
}

// startFrozen loads a frozen module (path, src) on a runtime of its own
// and starts it on an abitest.Host, checking the watch its initialisation
// declares.
func startFrozen(t *testing.T, path string, src []byte) (abi.Script, *abitest.Host) {
	t.Helper()
	ctx := context.Background()
	rt, err := wasm.New(wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(ctx) })
	p, err := rt.Compile(ctx, path, src)
	if err != nil {
		t.Fatalf("%s does not load: %v", path, err)
	}
	h := abitest.New()
	s, err := p.Start(ctx, h, abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(ctx) })
	if _, ok := h.Watches()["init/watched"]; !ok {
		t.Fatalf("watches after start %v", h.Watches())
	}
	return s, h
}

// TestRevision1Module: a module built for revision 1 imports none of
// timer, cancel and now, loads on this runtime, and runs as before; the
// SDK imports them only into a rule that calls them (testdata/verbs.wasm).
func TestRevision1Module(t *testing.T) {
	revision2 := []string{abi.FnTimer, abi.FnCancel, abi.FnNow}
	src, err := os.ReadFile(revision1Module)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range ssrunImports(t, src) {
		if slices.Contains(revision2, name) {
			t.Fatalf("%s imports %s", revision1Module, name)
		}
	}
	current, err := os.ReadFile(filepath.Join("testdata", "verbs.wasm"))
	if err != nil {
		t.Fatal(err)
	}
	if got := ssrunImports(t, current); !slices.Contains(got, abi.FnTimer) || !slices.Contains(got, abi.FnCancel) || !slices.Contains(got, abi.FnNow) {
		t.Fatalf("testdata/verbs.wasm imports %v, want timer, cancel and now among them", got)
	}

	s, h := startFrozen(t, revision1Module, src)
	h.Put("k", []byte("v"))
	ev := abi.Event{Key: "event", Op: abi.OpSet, Value: []byte("\x00v"), Version: "v1", Resync: true}
	for _, tc := range []struct {
		ev   abi.Event
		want string
	}{
		{ruletest.Command("get", "k"), "get status=OK msg= value=x76 text=v version=" + abitest.Version(1)},
		{ruletest.Command("set", "k2", "w", "1", "0", ""), "set status=OK msg= version=" + abitest.Version(2)},
		{ruletest.Command("lock", "L", "1000", "0"), "lock status=OK msg= token=" + abitest.Version(3)},
		{ev, "event op=SET key=event value=x0076 text=\x00v version=v1 resync=true"},
	} {
		if got := ruletest.Run(t, s, h, tc.ev); got != tc.want {
			t.Errorf("got  %q\nwant %q", got, tc.want)
		}
	}
}
