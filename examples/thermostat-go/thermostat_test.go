package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ssrun/ssrun/examples/internal/ruletests"
	"github.com/ssrun/ssrun/examples/internal/thermotest"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// TestThermostat builds the rule as the README says and plays the shared
// thermostat table (examples/internal/thermotest) against it through the
// real host and WebAssembly runtime on the embedded broker.
func TestThermostat(t *testing.T) {
	rules := t.TempDir()
	if err := gobuild.WASM(filepath.Join(rules, "thermostat.wasm"), "."); err != nil {
		t.Fatal(err)
	}
	rt, err := wasm.New(wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the host's cleanup
	thermotest.Run(t, rules, rt)
}

// TestThermostatTestFile runs the thermostat's `ssrun test` file (shared
// with the AssemblyScript build: same module name, same behaviour) on the
// rule built as the README says.
func TestThermostatTestFile(t *testing.T) {
	rules := t.TempDir()
	if err := gobuild.WASM(filepath.Join(rules, "thermostat.wasm"), "."); err != nil {
		t.Fatal(err)
	}
	rt, err := wasm.New(wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	ruletests.Run(t, rules, "../thermostat-as/rules/thermostat.test.yaml", rt)
}
