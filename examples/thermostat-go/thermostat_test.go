package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/ssrun/ssrun/examples/internal/thermotest"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// TestThermostat builds the rule as the README says and plays the shared
// thermostat table (examples/internal/thermotest) against it through the
// real host and WebAssembly runtime on the embedded broker.
func TestThermostat(t *testing.T) {
	rules := t.TempDir()
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(rules, "thermostat.wasm"), ".")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rt, err := wasm.New(wasm.Options{CacheDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) }) // after the host's cleanup
	thermotest.Run(t, rules, rt)
}
