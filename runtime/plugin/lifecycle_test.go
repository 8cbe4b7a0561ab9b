package plugin

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// processes returns every process: its state letter and its parent's pid,
// by pid.
func processes(t testing.TB) map[int]procInfo {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatalf("list processes: %v", err)
	}
	out := map[int]procInfo{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if info, ok := procStat(pid); ok {
			out[pid] = info
		}
	}
	return out
}

// procInfo is what the tests read of a process in /proc/<pid>/stat.
type procInfo struct {
	state string // "R", "S", "Z" (zombie)...
	ppid  int
}

// procStat reads the state and parent of pid; false if there is no such
// process.
func procStat(pid int) (procInfo, bool) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procInfo{}, false
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 2 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procInfo{state: f[0], ppid: ppid}, true
}

// alive reports whether a process with pid runs; a zombie (dead, not yet
// reaped by its parent) does not count.
func alive(pid int) bool {
	if testutil.NoProcess(pid) {
		return false
	}
	info, ok := procStat(pid)
	return ok && info.state != "Z" && info.state != "X"
}

// children returns the pids of this process's live child processes.
func children(t testing.TB) []int {
	t.Helper()
	var out []int
	for pid, info := range processes(t) {
		if info.ppid == os.Getpid() {
			out = append(out, pid)
		}
	}
	return out
}

// noChildren waits (up to 10 s) until this process has no child process.
func noChildren(t testing.TB) {
	t.Helper()
	testutil.WaitFor(t, "no child process", func() bool { return len(children(t)) == 0 })
}

func pidOf(t testing.TB, s *script, h *abitest.Host) int {
	t.Helper()
	r := run(t, s, h, command("pid"))
	_, p, _ := strings.Cut(r, " pid=")
	pid, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("pid report %q", r)
	}
	if st := s.stats(); st.Pid != pid {
		t.Fatalf("Stats.Pid %d, plugin says %d", st.Pid, pid)
	}
	return pid
}

// TestKillMidStream kills the plugin (SIGKILL) while it holds an event,
// then while it is idle: each time it is restarted, runs init again, and
// handles the following events. Exactly the one event in flight at the
// first kill is lost and reported: handled + lost == sent.
func TestKillMidStream(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, logs := ruleScript(t, h, abi.Limits{CallTimeout: 20 * time.Second})
		ctx := context.Background()
		sent, handled, lost := 0, 0, 0
		send := func(ev abi.Event) error {
			sent++
			err := s.Handle(ctx, ev)
			switch {
			case err == nil:
				handled++
			case errors.Is(err, abi.ErrCrashed) && strings.Contains(err.Error(), "the event was lost"):
				lost++
			}
			return err
		}
		seq := func(from, to int) {
			t.Helper()
			for i := from; i <= to; i++ {
				if err := send(command("seq", strconv.Itoa(i))); err != nil {
					t.Fatalf("event %d: %v", i, err)
				}
			}
		}
		seq(1, 5)
		pid1 := s.stats().Pid

		// The plugin takes the event, records it holds it, and never answers.
		errc := make(chan error, 1)
		go func() { errc <- send(command("hold")) }()
		testutil.WaitFor(t, "the plugin to hold the event", func() bool { _, ok := h.Value("inflight"); return ok })
		if err := testutil.Kill(pid1); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		if e := wantError(t, err, callHandle, abi.ErrCrashed); !strings.Contains(e.Msg, fmt.Sprintf("pid %d", pid1)) {
			t.Errorf("error %q does not name the process", err)
		}
		seq(6, 10) // the first waits for the restart
		testutil.ProcessGone(t, pid1)

		st := s.stats()
		if handled+lost != sent || lost != 1 || handled != 10 {
			t.Errorf("sent %d, handled %d, lost %d; want 11 = 10 + 1", sent, handled, lost)
		}
		if st.Lost != uint64(lost) || st.Starts != 2 || st.Exits != 1 || st.Pid == pid1 || st.Pid == 0 {
			t.Errorf("stats %+v; want Lost 1, Starts 2, Exits 1, a new pid", st)
		}
		for i := 1; i <= 10; i++ {
			if _, ok := h.Value("seen/" + strconv.Itoa(i)); !ok {
				t.Errorf("event %d was reported handled but its write is missing", i)
			}
		}
		if n := h.Calls(abi.FnWatch); n != 2 {
			t.Errorf("init's watch ran %d times, want 2 (start and restart)", n)
		}
		// The new process takes events as soon as it is up, which can be
		// before the restart is logged.
		restarted := `"plugin restarted" plugin=rule pid=` + strconv.Itoa(st.Pid) + ` starts=2`
		testutil.WaitFor(t, "the restart logged", func() bool { return strings.Contains(logs.String(), restarted) })
		for _, want := range []string{
			fmt.Sprintf(`"plugin process exited; restarting" plugin=rule pid=%d exit="signal: killed"`, pid1),
			`"plugin process died during a call; the event was lost" plugin=rule pid=` + strconv.Itoa(pid1) + ` key=hold op=SET lost_total=1`,
			`"plugin restarted" plugin=rule pid=` + strconv.Itoa(st.Pid) + ` starts=2`,
		} {
			if !strings.Contains(logs.String(), want) {
				t.Errorf("log lacks %s\nlog:\n%s", want, logs)
			}
		}

		// Killed while idle: the exit is noticed without any event.
		pid2 := st.Pid
		if err := testutil.Kill(pid2); err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, "the idle plugin to be restarted", func() bool { p := s.stats().Pid; return p != 0 && p != pid2 })
		seq(11, 11)
		if st := s.stats(); st.Lost != 1 || st.Starts != 3 || st.Exits != 2 {
			t.Errorf("stats %+v; want Lost 1, Starts 3, Exits 2", st)
		}
		testutil.ProcessGone(t, pid2)
	})
}

// TestHangTimeout: a handler that never returns fails with abi.ErrTimeout
// at the call timeout; the process is killed and the next event is handled
// by a new one.
func TestHangTimeout(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, logs := ruleScript(t, h, abi.Limits{CallTimeout: 2 * time.Second})
		pid1 := pidOf(t, s, h)
		err := s.Handle(context.Background(), command("hang"))
		if e := wantError(t, err, callHandle, abi.ErrTimeout); !strings.Contains(e.Msg, "no answer within 2s") || !strings.Contains(e.Msg, "killed") {
			t.Errorf("timeout error %q", err)
		}
		testutil.ProcessGone(t, pid1)
		if pid2 := pidOf(t, s, h); pid2 == pid1 {
			t.Errorf("the hung process %d still handles events", pid1)
		}
		if st := s.stats(); st.Timeouts != 1 || st.Exits != 1 || st.Lost != 0 || st.Starts != 2 {
			t.Errorf("stats %+v; want Timeouts 1, Exits 1, Lost 0, Starts 2", st)
		}
		if want := `reason="handler timed out"`; !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	})
}

// TestExitDuringCall: a plugin that exits while handling an event loses
// that event; the exit status is reported.
func TestExitDuringCall(t *testing.T) {
	forTransports(t, func(t *testing.T) {
		h := abitest.New()
		s, _, logs := ruleScript(t, h, abi.Limits{CallTimeout: 10 * time.Second})
		pid1 := s.stats().Pid
		wantError(t, s.Handle(context.Background(), command("exit")), callHandle, abi.ErrCrashed)
		if st := s.stats(); st.Lost != 1 {
			t.Errorf("lost %d, want 1", st.Lost)
		}
		if pid2 := pidOf(t, s, h); pid2 == pid1 {
			t.Errorf("pid %d after the exit, want a new process", pid2)
		}
		if want := fmt.Sprintf(`pid=%d exit="exit status 3"`, pid1); !strings.Contains(logs.String(), want) {
			t.Errorf("log lacks %s:\n%s", want, logs)
		}
	})
}

// TestHandlerErrors: errors returned by the handler (and panics) fail the
// event with the plugin's status and message; the plugin stays up. (In
// process: TestPanicStackInLog shows a plugin process's panic stack.)
func TestHandlerErrors(t *testing.T) {
	h := abitest.New()
	s, _, _ := inProcessScript(t, h, abi.Limits{CallTimeout: 10 * time.Second})
	pid := s.stats().Pid
	for _, tc := range []struct {
		ev       abi.Event
		sentinel error
		status   abi.Status
		msg      string
	}{
		{command("fail", "5"), abi.ErrCrashed, abi.StatusDenied, "failed on purpose"},
		{command("fail", "9"), abi.ErrTimeout, abi.StatusTimeout, "failed on purpose"},
		{command("plainfail"), abi.ErrCrashed, abi.StatusInternal, "plain failure"},
		{command("panic"), abi.ErrCrashed, abi.StatusInternal, "handle panicked: boom"},
		{command("nosuchcommand"), abi.ErrCrashed, abi.StatusInternal, `unknown command "nosuchcommand"`},
	} {
		err := s.Handle(context.Background(), tc.ev)
		e := wantError(t, err, callHandle, tc.sentinel)
		if e.Status != tc.status || e.Msg != tc.msg {
			t.Errorf("%s: status %s msg %q; want %s %q", tc.ev.Key, e.Status, e.Msg, tc.status, tc.msg)
		}
		if want := fmt.Sprintf("plugin %s: handle: %s (%s)", e.Plugin, tc.msg, tc.status); err.Error() != want {
			t.Errorf("error text %q, want %q", err, want)
		}
	}
	if st := s.stats(); st.Pid != pid || st.Exits != 0 || st.Starts != 1 {
		t.Errorf("stats %+v; the process should have stayed up (pid %d)", st, pid)
	}
}

// TestPanicStackInLog: a handler's panic fails the event, and its stack
// reaches the rule's log through the plugin process's stderr.
func TestPanicStackInLog(t *testing.T) {
	h := abitest.New()
	s, _, _ := ruleScript(t, h, abi.Limits{CallTimeout: 10 * time.Second})
	wantError(t, s.Handle(context.Background(), command("panic")), callHandle, abi.ErrCrashed)
	testutil.WaitFor(t, "the panic stack in the log", func() bool {
		return slices.ContainsFunc(h.Logs(), func(l abitest.LogLine) bool {
			return l.Level == abi.LevelWarn && strings.Contains(l.Msg, "handle panicked: boom")
		})
	})
}

// TestRestartFailure: while restarts fail, Handle reports it (and is bounded
// by its ctx); once the cause is gone, a later restart succeeds.
func TestRestartFailure(t *testing.T) {
	h := abitest.New()
	s, _, logs := ruleScript(t, h, abi.Limits{CallTimeout: 10 * time.Second})
	pid1 := s.stats().Pid
	h.Put("init/fail", []byte("down for maintenance"))
	if err := testutil.Kill(pid1); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the exit to be noticed", func() bool { return s.stats().Pid == 0 })
	err := s.Handle(context.Background(), command("noop"))
	if e := wantError(t, err, callHandle, abi.ErrCrashed); !strings.Contains(e.Msg, "restart failed") || !strings.Contains(e.Msg, "init refused: down for maintenance") {
		t.Errorf("error %q", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	wantError(t, s.Handle(ctx, command("noop")), callHandle, context.Canceled)

	if err := h.Del(context.Background(), "init/fail", abi.DelOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Handle(context.Background(), command("noop")); err != nil {
		t.Fatalf("after the cause is gone: %v", err)
	}
	if st := s.stats(); st.Starts != 2 || st.Exits != 1 || st.Lost != 0 {
		t.Errorf("stats %+v; want Starts 2, Exits 1, Lost 0", st)
	}
	if want := `"plugin restart failed" plugin=rule err="plugin ` + rulePlugin(t) + `: init: init refused: down for maintenance (DENIED)"`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs)
	}
}

// TestStartFailures: a plugin that cannot start or initialise fails Start
// with an error naming the call, and leaves no process behind.
func TestStartFailures(t *testing.T) {
	notPlugin := filepath.Join(t.TempDir(), "notplugin")
	if err := os.WriteFile(notPlugin, []byte("#!/bin/sh\necho this is not a plugin\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	notProgram := filepath.Join(t.TempDir(), "notprogram")
	if err := os.WriteFile(notProgram, []byte("neither a binary nor a script\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		file     string
		setup    func(s *abitest.Host)
		timeout  time.Duration
		call     string
		sentinel error
		msg      string
	}{
		{"not a plugin", notPlugin, nil, 10 * time.Second, callStart, abi.ErrCrashed, "this is not a plugin"},
		{"not a program", notProgram, nil, 10 * time.Second, callStart, abi.ErrCrashed, "exec format error"},
		{"init fails", "", func(s *abitest.Host) { s.Put("init/fail", []byte("nope")) }, 10 * time.Second, callInit, abi.ErrCrashed, "init refused: nope"},
		{"init hangs", "", func(s *abitest.Host) { s.Put("init/hang", nil) }, 300 * time.Millisecond, callInit, abi.ErrTimeout, "no answer within 300ms"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newRuntime(t, Config{})
			file := tc.file
			if file == "" {
				file = rulePlugin(t)
			}
			h := abitest.New()
			if tc.setup != nil {
				tc.setup(h)
			}
			_, err := compile(t, r, file).Start(context.Background(), h, abi.Limits{CallTimeout: tc.timeout})
			if e := wantError(t, err, tc.call, tc.sentinel); !strings.Contains(e.Msg, tc.msg) || e.Plugin != file {
				t.Errorf("error %q; want it to name %s and say %q", err, file, tc.msg)
			}
			if st := r.Stats(); len(st) != 0 {
				t.Errorf("stats %+v after a failed start", st)
			}
			noChildren(t)
		})
	}
}

// TestClose: Script.Close and Runtime.Close stop their processes gracefully
// (no kill needed), remove the copied binaries, and refuse further use.
func TestClose(t *testing.T) {
	r, logs := newRuntime(t, Config{ExecDir: filepath.Join(t.TempDir(), "exec")})
	p := compile(t, r, rulePlugin(t))
	h1, h2, h3 := abitest.New(), abitest.New(), abitest.New()
	lim := abi.Limits{CallTimeout: 20 * time.Second} // a loaded machine may take over the 1 s default to answer Init
	s1 := start(t, p, h1, lim)
	s2 := start(t, p, h2, lim)
	s3 := start(t, p, h3, lim)
	pids := []int{s1.stats().Pid, s2.stats().Pid, s3.stats().Pid}
	if got := len(r.Stats()); got != 3 {
		t.Fatalf("%d scripts in Stats, want 3", got)
	}

	if err := s1.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.ProcessGone(t, pids[0])
	if !errors.Is(s1.Handle(context.Background(), command("noop")), ErrClosed) {
		t.Error("Handle after Close did not fail with ErrClosed")
	}
	if _, err := os.Stat(s2.bin.path); err != nil {
		t.Errorf("the binary copy went away while scripts still use it: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids[1:] {
		testutil.ProcessGone(t, pid)
	}
	noChildren(t)
	if _, err := os.Stat(s2.bin.path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("binary copy still there after Close: %v", err)
	}
	if len(r.Stats()) != 0 {
		t.Errorf("stats after Close: %+v", r.Stats())
	}
	if _, err := r.Compile(context.Background(), rulePlugin(t), []byte("x")); !errors.Is(err, ErrClosed) {
		t.Errorf("Compile after Close: %v, want ErrClosed", err)
	}
	if strings.Contains(logs.String(), "grace period") || strings.Contains(logs.String(), "failed to exit gracefully") {
		t.Errorf("a plugin had to be killed on Close:\n%s", logs)
	}
}

// TestOutput: the plugin's stdout and stderr lines reach Host.Log at info
// and warn level; a partial last line is flushed when the process ends.
func TestOutput(t *testing.T) {
	h := abitest.New()
	r, _ := newRuntime(t, Config{})
	s := start(t, compile(t, r, rulePlugin(t)), h, abi.Limits{})
	run(t, s, h, command("print", "to stdout", "to stderr", "partial"))
	has := func(level int32, msg string) func() bool {
		return func() bool { return slices.Contains(h.Logs(), abitest.LogLine{Level: level, Msg: msg}) }
	}
	testutil.WaitFor(t, "the stdout line", has(abi.LevelInfo, "to stdout"))
	testutil.WaitFor(t, "the stderr line", has(abi.LevelWarn, "to stderr"))
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	testutil.WaitFor(t, "the partial line to arrive", func() bool {
		p.stdout.mu.Lock()
		defer p.stdout.mu.Unlock()
		return string(p.stdout.buf) == "partial"
	})
	if has(abi.LevelInfo, "partial")() {
		t.Fatal("a partial line was logged before the process ended")
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !has(abi.LevelInfo, "partial")() {
		t.Errorf("partial line not flushed at exit: %v", h.Logs())
	}
}

// The process tree a test plugin spawns (testdata/rule/tree.go), by index
// in the pids it reports.
var treeRoles = []string{"the plugin", "its plain child", "its setsid child", "its double-forked daemon"}

// spawnTree makes the plugin of s start its descendants and returns the
// pids: the plugin's, then its plain, setsid and daemon descendants'. The
// test's end kills any that survive it.
func spawnTree(t testing.TB, s *script, h *abitest.Host) []int {
	t.Helper()
	r := run(t, s, h, command("spawn"))
	_, list, _ := strings.Cut(r, " pids=")
	pids := pidList(t, list)
	if len(pids) != len(treeRoles) {
		t.Fatalf("spawn report %q: want %d pids", r, len(treeRoles))
	}
	killAtEnd(t, pids)
	return pids
}

// killAtEnd kills the processes still alive when the test ends, so that a
// failing test leaves nothing behind.
func killAtEnd(t testing.TB, pids []int) {
	t.Cleanup(func() {
		for _, pid := range pids {
			if alive(pid) {
				_ = testutil.Kill(pid)
			}
		}
	})
}

// pidList parses a list of pids as the test plugin and the helper host
// print them: "1,2,3".
func pidList(t testing.TB, list string) []int {
	t.Helper()
	var pids []int
	for f := range strings.SplitSeq(list, ",") {
		pid, err := strconv.Atoi(f)
		if err != nil {
			t.Fatalf("pid list %q", list)
		}
		pids = append(pids, pid)
	}
	return pids
}

// TestRawStderr: what reaches the plugin's original stderr (fd 2) rather
// than os.Stderr (a Go runtime crash, output of processes it starts, hclog
// lines) goes to the rule's Host.Log, hclog lines at their level, and
// none of it to the runtime's own logger.
func TestRawStderr(t *testing.T) {
	h := abitest.New()
	logs := &testutil.Buffer{}
	r, _ := newRuntime(t, Config{Logger: slogTo(logs)})
	s := start(t, compile(t, r, rulePlugin(t)), h, abi.Limits{})
	run(t, s, h, command("stderr", "a raw line", "an hclog line"))
	pids := spawnTree(t, s, h)
	child := fmt.Sprintf("sleeper %d started", pids[1]) // the plain child's stderr is fd 2
	for _, want := range []abitest.LogLine{
		{Level: abi.LevelWarn, Msg: "a raw line"},
		{Level: abi.LevelError, Msg: "an hclog line k=v"},
		{Level: abi.LevelWarn, Msg: child},
	} {
		testutil.WaitFor(t, fmt.Sprintf("%+v in the rule's log", want), func() bool { return slices.Contains(h.Logs(), want) })
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, leak := range []string{"a raw line", "an hclog line", child} {
		if strings.Contains(logs.String(), leak) {
			t.Errorf("the runtime's logger got the plugin's output %q:\n%s", leak, logs)
		}
	}
}

func TestBackoff(t *testing.T) {
	var b backoff
	var got []time.Duration
	for range 12 {
		got = append(got, b.next(time.Second))
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 12800 * time.Millisecond,
		25600 * time.Millisecond, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	if !slices.Equal(got, want) {
		t.Errorf("delays %v, want %v", got, want)
	}
	if d := b.next(stableAfter); d != restartMin {
		t.Errorf("after a stable run: %v, want %v", d, restartMin)
	}
	if d := b.next(0); d != 2*restartMin {
		t.Errorf("failed start after the reset: %v, want %v", d, 2*restartMin)
	}
}

// Environment of the helper host: the test binary run again as a host
// process, so that a test can end it by a signal.
const (
	helperEnv      = "SSRUN_PLUGIN_TEST_HELPER" // the plugin file to run
	helperSpawnEnv = "SSRUN_PLUGIN_TEST_SPAWN"  // set: the plugin spawns descendants
)

// helperHost starts the plugin named by helperEnv on a Runtime with the
// default options, makes it spawn its descendants if helperSpawnEnv is set,
// and prints "pids <plugin>[,<descendant>...]". Then it waits for SIGTERM,
// on which it closes the runtime and exits, as ssrun does.
func helperHost() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "helper host:", err)
		os.Exit(1)
	}
	r, err := New(Config{Logger: quietLogger()})
	if err != nil {
		fail(err)
	}
	file := os.Getenv(helperEnv)
	src, err := os.ReadFile(file)
	if err != nil {
		fail(err)
	}
	p, err := r.Compile(ctx, file, src)
	if err != nil {
		fail(err)
	}
	h := abitest.New()
	s, err := p.Start(ctx, h, abi.Limits{CallTimeout: time.Minute})
	if err != nil {
		fail(err)
	}
	pids := strconv.Itoa(s.(*script).stats().Pid)
	if os.Getenv(helperSpawnEnv) != "" {
		if err := s.Handle(ctx, command("spawn")); err != nil {
			fail(err)
		}
		reports := ruletest.Reports(h)
		_, pids, _ = strings.Cut(reports[len(reports)-1], " pids=")
	}
	fmt.Printf("pids %s\n", pids)
	<-ctx.Done()
	cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Close(cctx); err != nil {
		fail(err)
	}
	os.Exit(0)
}

// helper is a running helperHost.
type helper struct {
	cmd  *exec.Cmd
	pids []int         // the plugin's, then its descendants'
	done chan struct{} // closed when it exited; then err is its exit
	err  error
}

// startHelper runs helperHost with TMPDIR set to tmp. The test's end kills
// it if it still runs.
func startHelper(t testing.TB, tmp string, spawn bool) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"="+rulePlugin(t), "TMPDIR="+tmp)
	if spawn {
		cmd.Env = append(cmd.Env, helperSpawnEnv+"=1")
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	hp := &helper{cmd: cmd, done: make(chan struct{})}
	var list string
	_, scanErr := fmt.Fscanf(out, "pids %s\n", &list)
	go func() {
		defer close(hp.done)
		_, _ = io.Copy(io.Discard, out)
		hp.err = cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-hp.done
	})
	if scanErr != nil {
		t.Fatalf("helper host: %v", scanErr)
	}
	hp.pids = pidList(t, list)
	return hp
}
