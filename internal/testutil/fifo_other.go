//go:build !unix

package testutil

import "testing"

// Mkfifo skips the test: this platform has no named pipes in its folders.
func Mkfifo(tb testing.TB, path string) {
	tb.Helper()
	tb.Skipf("no named pipes (mkfifo) on this platform: %s not made", path)
}
