// Package testutil is what the tests of every package share: a TestMain
// that checks for leaked goroutines (Main), polling with a bound (WaitFor),
// closing what a test started when it ends (CloseAtEnd), a goroutine-safe
// buffer for captured output (Buffer), a writer into t.Log (LogWriter), a
// self-signed TLS certificate (SelfSignedCert), a folder laid out as a
// Kubernetes ConfigMap volume (ConfigMapDir), files that are no files (a
// named pipe: Mkfifo; a link to /dev/zero: LinkDevZero) and a bound on a
// call that must not block (Returns), and for benchmarks a load generator
// (InFlight) and rates against a baseline (ReportRates).
//
// Only tests import it: it imports package testing and goleak.
package testutil

import (
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// Main is the whole of a package's TestMain:
//
//	func TestMain(m *testing.M) { testutil.Main(m, builds.Remove) }
//
// It runs the tests, then each cleanup in order (what the tests built or
// started once for all of them: binaries, a shared runtime, a cache
// directory), and then, if every test passed, looks for goroutines still
// running (goleak.Find, which waits a while for those that are ending).
// A cleanup's error or a leak fails the run and is told on stderr. Main
// exits with the tests' status, or 1 for such a failure.
//
// Processes the tests start get atexit_sleep_ms=0 added to GORACE: a
// process built with -race, such as the test binary run again as a helper
// or as a plugin's reaper, otherwise sleeps a second when it exits.
func Main(m *testing.M, cleanups ...func() error) {
	noRaceExitSleep()
	os.Exit(run(m, os.Stderr, cleanups...))
}

// noRaceExitSleep adds atexit_sleep_ms=0 to GORACE for child processes
// (the race runtime reads it at start, so this process keeps its own).
func noRaceExitSleep() {
	if err := os.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0")); err != nil {
		panic(err)
	}
}

// run is Main without the exit, reporting failures to stderr.
func run(m interface{ Run() int }, stderr io.Writer, cleanups ...func() error) int {
	code := m.Run()
	for _, c := range cleanups {
		if err := c(); err != nil {
			fmt.Fprintln(stderr, "cleanup:", err)
			code = max(code, 1)
		}
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(stderr, "goroutine leak:", err)
			code = 1
		}
	}
	return code
}
