package main

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/ssrun/ssrun/examples/internal/doortest"
	"github.com/ssrun/ssrun/examples/internal/ruletests"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// TestDoorAlarm builds the rule as its doc comment says and plays the
// shared door-alarm scenario (examples/internal/doortest: restarts of the
// host before and past a pending deadline, cancel, repeated opens) through
// the real host and WebAssembly runtime on the embedded broker.
func TestDoorAlarm(t *testing.T) {
	rules := t.TempDir()
	if err := gobuild.WASM(filepath.Join(rules, "door.wasm"), "."); err != nil {
		t.Fatal(err)
	}
	rt, err := wasm.New(wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the hosts' cleanups
	doortest.Run(t, rules, rt)
}

// TestDoorAlarmTestFile runs testdata/door.test.yaml (`ssrun test`, on a
// virtual clock) on the rule built as its doc comment says.
func TestDoorAlarmTestFile(t *testing.T) {
	rules := t.TempDir()
	if err := gobuild.WASM(filepath.Join(rules, "door.wasm"), "."); err != nil {
		t.Fatal(err)
	}
	rt, err := wasm.New(wasm.Config{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	ruletests.Run(t, rules, "testdata/door.test.yaml", rt)
}
