package main

import (
	"testing"

	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/examples/internal/ruletests"
	"github.com/ssrun/ssrun/examples/internal/thermotest"
)

// TestThermostat builds the rule as the README says and plays the shared
// thermostat table (examples/internal/thermotest) against it through the
// real host and WebAssembly runtime on the embedded broker.
func TestThermostat(t *testing.T) {
	rules := examplehost.GoWASMRules(t, "thermostat.wasm")
	thermotest.Run(t, rules, examplehost.WASMRuntime(t))
}

// TestThermostatTestFile runs the thermostat's `ssrun test` file (shared
// with the AssemblyScript build: same module name, same behaviour) on the
// rule built as the README says.
func TestThermostatTestFile(t *testing.T) {
	rules := examplehost.GoWASMRules(t, "thermostat.wasm")
	ruletests.Run(t, rules, "../thermostat-as/rules/thermostat.test.yaml", examplehost.WASMRuntime(t))
}
