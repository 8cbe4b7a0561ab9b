package testutil

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeTB records what a helper reports instead of failing the test.
type fakeTB struct {
	testing.TB
	mu       sync.Mutex
	fatals   []string
	logs     []string
	cleanups []func()
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatals = append(f.fatals, fmt.Sprint(args...))
}
func (f *fakeTB) Fatalf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }
func (f *fakeTB) Error(args ...any)                 { f.Fatal(args...) }
func (f *fakeTB) Errorf(format string, args ...any) { f.Fatal(fmt.Sprintf(format, args...)) }
func (f *fakeTB) FailNow()                          { f.Fatal("FailNow") }
func (f *fakeTB) Log(args ...any)                   { f.logs = append(f.logs, fmt.Sprint(args...)) }
func (f *fakeTB) Cleanup(c func())                  { f.cleanups = append(f.cleanups, c) }

// runM is a testing.M whose Run runs f.
type runM func() int

func (f runM) Run() int { return f() }

// run fails a passing run that leaves a goroutine behind, but not when a
// cleanup stops it, and does not look for leaks when a test failed; a
// cleanup's error fails the run.
func TestRunChecksLeaksAfterCleanups(t *testing.T) {
	for _, tc := range []struct {
		name    string
		code    int  // of the tests
		stop    bool // a cleanup stops the goroutine
		failing bool // a cleanup fails
		want    int
		stderr  string
	}{
		{"leak", 0, false, false, 1, "goroutine leak:"},
		{"stopped by a cleanup", 0, true, false, 0, ""},
		{"tests failed", 2, false, false, 2, ""},
		{"cleanup fails", 0, true, true, 1, "cleanup: cannot remove"},
		{"cleanup fails after failed tests", 2, true, true, 2, "cleanup: cannot remove"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			var wg sync.WaitGroup
			m := runM(func() int {
				wg.Go(func() { <-release })
				return tc.code
			})
			var order []string
			cleanups := []func() error{func() error { order = append(order, "first"); return nil }}
			if tc.failing {
				cleanups = append(cleanups, func() error { order = append(order, "failing"); return errors.New("cannot remove") })
			}
			if tc.stop {
				cleanups = append(cleanups, func() error { order = append(order, "stop"); close(release); wg.Wait(); return nil })
			}
			var stderr Buffer
			got := run(m, &stderr, cleanups...)
			if !tc.stop {
				close(release)
				wg.Wait()
			}
			if got != tc.want {
				t.Errorf("exit code %d, want %d", got, tc.want)
			}
			if tc.stderr == "" && stderr.String() != "" || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("stderr %q, want %q", stderr.String(), tc.stderr)
			}
			if want := len(cleanups); len(order) != want || order[0] != "first" {
				t.Errorf("cleanups ran %v, want all %d in order", order, want)
			}
		})
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	WaitFor(t, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("cond called %d times, want 3", n)
	}
	f := &fakeTB{}
	waitFor(f, 20*time.Millisecond, "never", func() bool { return false })
	if want := []string{"timed out after 20ms waiting for never"}; !slices.Equal(f.fatals, want) {
		t.Errorf("failures %q, want %q", f.fatals, want)
	}
}

func TestBuffer(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for range 100 {
				_, _ = fmt.Fprintf(&b, "%d", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	s := b.String()
	for i := range 4 {
		if got := strings.Count(s, fmt.Sprint(i)); got != 100 {
			t.Errorf("%d written %d times, want 100", i, got)
		}
	}
}

func TestLogWriter(t *testing.T) {
	f := &fakeTB{}
	w := LogWriter(f)
	_, _ = io.WriteString(w, "level=INFO msg=one\n")
	for _, c := range f.cleanups {
		c()
	}
	if n, err := io.WriteString(w, "after the end\n"); n != len("after the end\n") || err != nil {
		t.Errorf("write after the end: %d, %v", n, err)
	}
	if want := []string{"level=INFO msg=one"}; !slices.Equal(f.logs, want) {
		t.Errorf("logged %q, want %q", f.logs, want)
	}
}

// The certificate serves TLS for localhost and 127.0.0.1 to a client that
// trusts only the returned pool.
func TestSelfSignedCert(t *testing.T) {
	certFile, keyFile, pool := SelfSignedCert(t)
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer ln.Close()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.(*tls.Conn).Handshake()
			_ = c.Close()
		}
	})
	for _, name := range []string{"localhost", "127.0.0.1"} {
		c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool, ServerName: name, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Errorf("server name %s: %v", name, err)
			continue
		}
		_ = c.Close()
	}
	if _, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{ServerName: "localhost", MinVersion: tls.VersionTLS12}); err == nil {
		t.Error("a client without the pool trusted the certificate")
	}
}

func TestInFlight(t *testing.T) {
	const workers, n = 4, 200
	var seen [n]atomic.Int32
	var busy, most atomic.Int32
	InFlight(t, workers, n, func(w, i int) error {
		if w < 0 || w >= workers {
			t.Errorf("worker %d", w)
		}
		now := busy.Add(1)
		defer busy.Add(-1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		seen[i].Add(1)
		return nil
	})
	for i := range seen {
		if c := seen[i].Load(); c != 1 {
			t.Errorf("request %d made %d times", i, c)
		}
	}
	if most.Load() > workers {
		t.Errorf("%d requests in flight, at most %d allowed", most.Load(), workers)
	}
	f := &fakeTB{}
	InFlight(f, 2, 10, func(_, i int) error {
		if i == 3 || i == 4 {
			return fmt.Errorf("request %d failed", i)
		}
		return nil
	})
	slices.Sort(f.fatals)
	if want := []string{"FailNow", "request 3 failed", "request 4 failed"}; !slices.Equal(f.fatals, want) {
		t.Errorf("failures %q, want %q", f.fatals, want)
	}
}

func TestCloseAtEnd(t *testing.T) {
	f := &fakeTB{}
	var order []string
	var deadline bool
	CloseAtEnd(f, "runtime", func(ctx context.Context) error {
		_, deadline = ctx.Deadline()
		order = append(order, "runtime")
		return errors.New("busy")
	})
	CloseAtEnd(f, "host", func(context.Context) error { order = append(order, "host"); return nil })
	if len(order) != 0 {
		t.Fatalf("closed before the end: %v", order)
	}
	for i := len(f.cleanups) - 1; i >= 0; i-- { // as testing runs them
		f.cleanups[i]()
	}
	if want := []string{"host", "runtime"}; !slices.Equal(order, want) {
		t.Errorf("closed %v, want %v", order, want)
	}
	if !deadline {
		t.Error("close had no deadline")
	}
	if want := []string{"close runtime: busy"}; !slices.Equal(f.fatals, want) {
		t.Errorf("failures %q, want %q", f.fatals, want)
	}
}

// Main (this package's TestMain) gave the processes the tests start a
// GORACE without the race runtime's exit sleep, keeping what was there.
func TestNoRaceExitSleep(t *testing.T) {
	if got := os.Getenv("GORACE"); !strings.HasSuffix(got, "atexit_sleep_ms=0") {
		t.Errorf("GORACE=%q", got)
	}
	t.Setenv("GORACE", "halt_on_error=1")
	noRaceExitSleep()
	if got, want := os.Getenv("GORACE"), "halt_on_error=1 atexit_sleep_ms=0"; got != want {
		t.Errorf("GORACE=%q, want %q", got, want)
	}
}

func TestReportRates(t *testing.T) {
	names := []string{"base", "half"}
	r := testing.Benchmark(func(b *testing.B) {
		ReportRates(b, []time.Duration{time.Second, 2 * time.Second}, func(i int) string { return names[i] }, "-op/s", "-x-base")
	})
	n := float64(r.N)
	if got := r.Extra; got["base-op/s"] != n || got["half-op/s"] != n/2 || got["half-x-base"] != 0.5 || len(got) != 3 {
		t.Errorf("metrics %v for N=%d", got, r.N)
	}
}
