package wasm

import (
	"bytes"
	"context"
	"crypto/rand"
	"slices"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// v is the n-th version abitest hands out.
var v = abitest.Version

// verbCases are the shared cases and those particular to the Go SDK.
func verbCases() []ruletest.VerbCase {
	big := make([]byte, 100<<10) // > 64 KiB: the SDK's buffer is too small, the result comes through `result`
	_, _ = rand.Read(big)
	return append(ruletest.VerbCases(), []ruletest.VerbCase{
		{Name: "get ok 100 KiB via result", Setup: func(h *abitest.Host) { h.Put("big", big) },
			Cmd:  []string{"get", "big"},
			Want: `get status=OK msg="" value=` + ruletest.Show(big) + ` version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if n := h.Calls(abi.FnGet); n != 1 {
					t.Errorf("host get called %d times; the result must be fetched without repeating it", n)
				}
			}},
		{Name: "set ok binary", Cmd: []string{"set", "k", ruletest.Binary, "0", "0s", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if got, _ := h.Value("k"); string(got) != ruletest.Binary {
					t.Errorf("stored %q, want %q", got, ruletest.Binary)
				}
				if c, _ := h.LastCall(abi.FnSet); c.Set != (abi.SetOptions{}) {
					t.Errorf("options %+v, want none", c.Set)
				}
			}},
		{Name: "set ok empty value", Cmd: []string{"set", "k", "", "0", "0s", ""},
			Want: `set status=OK msg="" version="` + v(1) + `"`,
			Check: func(t *testing.T, h *abitest.Host) {
				if got, ok := h.Value("k"); !ok || len(got) != 0 {
					t.Errorf("stored %q (present %t), want empty value", got, ok)
				}
			}},
		{Name: "set two options values", Cmd: []string{"set-twice-opts", "k"},
			Want:  `set status=INVALID msg="set \"k\": 2 options values, want at most one"`,
			Check: ruletest.NotCalled(abi.FnSet)},
		{Name: "unwatch ok", Cmd: []string{"unwatch", "init/watched"}, Want: `unwatch status=OK msg=""`,
			Check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Watches()["init/watched"]; ok {
					t.Error("still watched")
				}
			}},
	}...)
}

// TestVerbs proves every verb is wired from the Go SDK through the host
// module to abi.Host: arguments (binary-safe), options, results, every
// status and its message (through last_error).
func TestVerbs(t *testing.T) {
	p := compile(t, sharedRuntime(t), "rule.wasm", guest(t, "rule"))
	ruletest.RunVerbCases(t, verbCases(), func(t *testing.T) (abi.Script, *abitest.Host) {
		h := abitest.New()
		return start(t, p, h, abi.Limits{}), h
	})
}

// TestHostModuleIsABI checks that the host module offers exactly the host
// functions of abi.HostFunctions().
func TestHostModuleIsABI(t *testing.T) {
	var names []string
	for _, f := range hostFuncs {
		names = append(names, f.name)
		if len(f.names) != len(f.params) {
			t.Errorf("%s: %d parameter names for %d parameters", f.name, len(f.names), len(f.params))
		}
	}
	if !slices.Equal(names, abi.HostFunctions()) {
		t.Fatalf("host functions %v, abi.HostFunctions() %v", names, abi.HostFunctions())
	}
	e, err := sharedRuntime(t).engine(context.Background(), abi.DefaultMemoryBytes/pageSize)
	if err != nil {
		t.Fatal(err)
	}
	defs := e.rt.Module(abi.ImportModule).ExportedFunctionDefinitions()
	if len(defs) != len(abi.HostFunctions()) {
		t.Fatalf("host module exports %d functions, want %d", len(defs), len(abi.HostFunctions()))
	}
	for _, f := range hostFuncs {
		def, ok := defs[f.name]
		if !ok {
			t.Fatalf("host module lacks %s", f.name)
		}
		if got := signature(def.ParamTypes(), def.ResultTypes()); got != hostSignatures[f.name] {
			t.Errorf("%s: %s, want %s", f.name, got, hostSignatures[f.name])
		}
	}
}

// TestEventDelivery checks the event record reaches the Go handler intact.
func TestEventDelivery(t *testing.T) {
	h := abitest.New()
	s := ruleScript(t, h, abi.Limits{})
	for _, ev := range ruletest.Events(bytes.Repeat([]byte{0, 0xff, '\n'}, 50<<10)) {
		want := ruletest.EventReport(ev)
		if got := run(t, s, h, ev); got != want {
			t.Errorf("got  %s\nwant %s", got, want)
		}
	}
}
