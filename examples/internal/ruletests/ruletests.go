// Package ruletests runs a built example's `ssrun test` file (testrun) from
// the example's Go test: the Go WebAssembly examples are built by their
// tests, not committed, so `ssrun test examples/...` cannot run them.
package ruletests

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/testrun"
)

// Run copies the test file at testFile into dir (which holds the built
// rule the file tests) and runs it with runtimes, failing t with the
// report when a case fails.
func Run(t *testing.T, dir, testFile string, runtimes ...abi.Runtime) {
	t.Helper()
	src, err := os.ReadFile(testFile)
	if err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, filepath.Base(testFile))
	if err := os.WriteFile(dst, src, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	failed, err := testrun.Run(ctx, []string{dst}, testrun.Options{Runtimes: runtimes, Report: &testrun.Reporter{Out: &out, Verbose: true}})
	if err != nil || failed != 0 {
		t.Fatalf("ssrun test %s: %d failed, %v\n%s", testFile, failed, err, out.String())
	}
	t.Logf("ssrun test %s:\n%s", testFile, out.String())
}
