package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testutil"
)

// The tests in this file run the ssrun binary as a process, to send it
// signals, with a WebAssembly rule that sleeps for an hour
// (testdata/sleeper): the process must end within a bound anyway.

var builds = gobuild.Dir{Prefix: "ssrun-cli-test-"}

// ssrunBinary builds this command once per test binary.
func ssrunBinary(t *testing.T) string {
	t.Helper()
	p, err := builds.Exe("ssrun", ".")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// sleeper copies the sleeping rule into dir as name ("sleep-init.wasm" or
// "sleep-handler.wasm").
func sleeper(t *testing.T, dir, name string) {
	t.Helper()
	p, err := builds.WASM("sleeper.wasm", "./testdata/sleeper")
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, p, filepath.Join(dir, name), 0o644)
}

// copyFile copies src to dst, made with mode.
func copyFile(t *testing.T, src, dst string, mode os.FileMode) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, mode); err != nil {
		t.Fatal(err)
	}
}

// stopBound is how long a process may take to end after a signal in these
// tests: far below the hour the rule sleeps, far above the deadlines,
// graces and shutdown timeouts the tests configure.
const stopBound = 60 * time.Second

// proc is a running ssrun process.
type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdout *testutil.Buffer
	stderr *testutil.Buffer
	exited chan struct{}
	err    error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(ssrunBinary(t), args...))
}

// startCmd starts cmd, an ssrun command line with its environment or
// working directory set, as startProc does.
func startCmd(t *testing.T, cmd *exec.Cmd) *proc {
	t.Helper()
	p := &proc{t: t, cmd: cmd, stdout: &testutil.Buffer{}, stderr: &testutil.Buffer{}, exited: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *proc) signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// wait waits for the process to end within stopBound and returns its exit
// status.
func (p *proc) wait(what string) int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(stopBound):
		p.t.Fatalf("%s: the process did not end within %v; stderr:\n%s", what, stopBound, p.stderr.String())
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		p.t.Fatal(p.err)
	}
	return 0
}

// startDev starts `ssrun dev` on dir and waits until its rules are loaded;
// it returns the broker address.
func startDev(t *testing.T, dir string, args ...string) (*proc, string) {
	t.Helper()
	p := startProc(t, append([]string{"dev", dir, "--listen", "127.0.0.1:0"}, args...)...)
	m := waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))
	return p, m[1]
}

// sleepDir is a rules folder with the handler-sleeping rule and the
// ssrun.yaml settings given for it.
func sleepDir(t *testing.T, settings string) string {
	t.Helper()
	dir := t.TempDir()
	sleeper(t, dir, "sleep-handler.wasm")
	yaml := "rules:\n  sleep-handler.wasm:\n" + settings
	testutil.WriteFiles(t, dir, map[string]string{"ssrun.yaml": yaml})
	return dir
}

// stick starts the sleeping handler and waits until it sleeps.
func stick(t *testing.T, p *proc, addr string) {
	t.Helper()
	if r := runCLI(t, "", "kv", "--broker", addr, "set", "sleep/in", "1"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	waitOutput(t, p.stderr, regexp.MustCompile(`sleeping in handler`))
}

// SIGTERM stops `ssrun dev` at once while a rule sleeps in its handler: the
// sleep is interrupted (the WebAssembly runtime honours cancellation), the
// rule is stopped, and the process exits cleanly. (A runtime that does not
// return at all is abandoned after its deadline plus the grace: host's
// stuck-runtime tests.)
func TestDevStopsOnSIGTERMWhileARuleSleeps(t *testing.T) {
	p, addr := startDev(t, sleepDir(t, "    grace: 1h\n    timeout: 1h\n"))
	stick(t, p, addr)
	p.signal(syscall.SIGTERM)
	code := p.wait("SIGTERM with a rule sleeping in its handler")
	if code != 0 || !strings.Contains(p.stderr.String(), "rule stopped") || strings.Contains(p.stderr.String(), "rule abandoned") {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
}

// The first signal cancels and prints how to exit at once; a second exits
// with 128+signal; without one, the backstop exits with 1 at the bound; a
// command that returns in time ends the watch.
func TestSignalWatch(t *testing.T) {
	type outcome struct {
		code     int
		canceled bool
		stderr   string
	}
	watch := func(bound time.Duration, drive func(sigs chan<- os.Signal, done chan<- struct{}, canceling <-chan struct{})) outcome {
		sigs := make(chan os.Signal, 2)
		done := make(chan struct{})
		exited := make(chan int, 1)
		canceling := make(chan struct{})
		var canceled atomic.Bool
		var buf testutil.Buffer
		w := signalWatch{sigs: sigs, cancel: func() { canceled.Store(true); close(canceling) }, stderr: &buf,
			bound: func() time.Duration { return bound }, exit: func(code int) { exited <- code }}
		finished := make(chan struct{})
		go func() { defer close(finished); w.run(done) }()
		drive(sigs, done, canceling)
		<-finished
		o := outcome{code: -1, canceled: canceled.Load(), stderr: buf.String()}
		select {
		case o.code = <-exited:
		default:
		}
		return o
	}
	if o := watch(time.Hour, func(sigs chan<- os.Signal, _ chan<- struct{}, _ <-chan struct{}) {
		sigs <- syscall.SIGTERM
		sigs <- syscall.SIGINT
	}); o.code != 128+int(syscall.SIGINT) || !o.canceled || !strings.Contains(o.stderr, "send the signal again") || !strings.Contains(o.stderr, "second signal") {
		t.Errorf("second signal: %+v", o)
	}
	if o := watch(time.Millisecond, func(sigs chan<- os.Signal, _ chan<- struct{}, _ <-chan struct{}) {
		sigs <- syscall.SIGTERM
	}); o.code != 1 || !o.canceled || !strings.Contains(o.stderr, "still running") {
		t.Errorf("backstop: %+v", o)
	}
	if o := watch(time.Hour, func(sigs chan<- os.Signal, done chan<- struct{}, canceling <-chan struct{}) {
		sigs <- syscall.SIGTERM
		<-canceling // the command then returns in time
		close(done)
	}); o.code != -1 || !o.canceled {
		t.Errorf("stopped in time: %+v", o)
	}
	if o := watch(time.Hour, func(_ chan<- os.Signal, done chan<- struct{}, _ <-chan struct{}) { close(done) }); o.code != -1 || o.canceled || o.stderr != "" {
		t.Errorf("no signal: %+v", o)
	}
}

// A rule that sleeps in its initialisation neither hangs `ssrun dev` (a
// signal during start-up ends it) nor `ssrun check` (bounded by --timeout).
func TestStuckInitialisationIsBounded(t *testing.T) {
	dir := t.TempDir()
	sleeper(t, dir, "sleep-init.wasm")
	rule := filepath.Join(dir, "sleep-init.wasm")
	testutil.WriteFiles(t, dir, map[string]string{"ssrun.yaml": "defaults:\n  grace: 500ms\n"})
	t.Run("dev", func(t *testing.T) {
		p := startProc(t, "dev", dir, "--listen", "127.0.0.1:0", "--log-level", "debug")
		waitOutput(t, p.stderr, regexp.MustCompile(`sleeping in init`))
		p.signal(syscall.SIGTERM)
		p.wait("SIGTERM during start-up")
	})
	t.Run("check", func(t *testing.T) {
		p := startProc(t, "check", "--timeout", "1s", rule)
		code := p.wait("check")
		// Stopped at the initialisation's deadline by the runtime, or
		// abandoned by the host's bound: either way named and failed.
		stderr := p.stderr.String()
		if code != 1 || !strings.Contains(stderr, rule) || !(strings.Contains(stderr, "deadline") || strings.Contains(stderr, "did not return")) {
			t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
		}
	})
}
