package main

import (
	"fmt"
	"os"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) {
	// ssrun dev publishes its admin address under $XDG_RUNTIME_DIR: the
	// tests' devs publish theirs in a folder of their own, not the user's.
	run, err := os.MkdirTemp("", "ssrun-cli-test-run-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv("XDG_RUNTIME_DIR", run)
	testutil.Main(m, builds.Remove, func() error { return os.RemoveAll(run) })
}
