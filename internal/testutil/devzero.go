package testutil

import (
	"os"
	"testing"
)

// LinkDevZero makes path a symbolic link to /dev/zero, a file without end;
// it skips the test where there is no /dev/zero.
func LinkDevZero(tb testing.TB, path string) {
	tb.Helper()
	if _, err := os.Stat("/dev/zero"); err != nil {
		tb.Skipf("no /dev/zero here: %v", err)
	}
	if err := os.Symlink("/dev/zero", path); err != nil {
		tb.Fatal(err)
	}
}
