package testutil

import (
	"io"
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if os.Getenv("SSRUN_TESTUTIL_HANG") != "" { // TestProcessGone's child: runs until killed (or its stdin ends)
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}
	Main(m)
}
