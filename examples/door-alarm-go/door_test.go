package main

import (
	"testing"

	"github.com/ssrun/ssrun/examples/internal/doortest"
	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/examples/internal/ruletests"
)

// TestDoorAlarm builds the rule as its doc comment says and plays the
// shared door-alarm scenario (examples/internal/doortest: restarts of the
// host before and past a pending deadline, cancel, repeated opens) through
// the real host and WebAssembly runtime on the embedded broker.
func TestDoorAlarm(t *testing.T) {
	rules := examplehost.GoWASMRules(t, "door.wasm")
	doortest.Run(t, rules, examplehost.WASMRuntime(t))
}

// TestDoorAlarmTestFile runs testdata/door.test.yaml (`ssrun test`, on a
// virtual clock) on the rule built as its doc comment says.
func TestDoorAlarmTestFile(t *testing.T) {
	rules := examplehost.GoWASMRules(t, "door.wasm")
	ruletests.Run(t, rules, "testdata/door.test.yaml", examplehost.WASMRuntime(t))
}
