package wasm

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// TestFailuresRecover: each way a handler can fail gives its error, and the
// same Script handles the next event; broken instances are replaced (the
// rule's init runs again), intact ones kept. Meanwhile a second Script
// keeps handling events.
func TestFailuresRecover(t *testing.T) {
	ctx := context.Background()
	h := abitest.New()
	s := ruleScript(t, h, abi.Limits{CallTimeout: time.Second, MemoryBytes: 16 << 20})
	// The memory bomb gets a long deadline so that memory is the only way
	// it can end, however loaded the machine (it missed 1 s under -race).
	bomber := ruleScript(t, h, abi.Limits{CallTimeout: time.Minute, MemoryBytes: 16 << 20})

	other := abitest.New()
	s2 := ruleScript(t, other, abi.Limits{})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var handled atomic.Int64
	var otherErr error
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := s2.Handle(ctx, command("echo", "c", strconv.Itoa(i))); err != nil {
				otherErr = err
				return
			}
			handled.Add(1)
		}
	})

	cases := []struct {
		cmd      string
		is       error
		msg      string // in the error
		replaced bool
		log      string // prefix of an error-level log line from the SDK
	}{
		{"error", abi.ErrCrashed, "handler failed: returned -1 (the rule's log has its message)", false, "handler: the rule says no"},
		{"abi-error", abi.ErrCrashed, "handler failed: status NOT_FOUND (the rule's log has its message)", false, `handler: get "absent": not found`},
		{"panic", abi.ErrCrashed, "handler failed: returned -1 (the rule's log has its message)", false, "handler panic: rule panics\n"},
		{"exit", abi.ErrCrashed, "handler failed: the rule exited with code 3", true, ""},
		{"trap", abi.ErrCrashed, "handler failed: ssrun.unwatch: key [4294901760, 4294901760+1024) is outside guest memory (", true, ""},
		{"loop", abi.ErrTimeout, "handler exceeded its deadline (limit 1s)", true, ""},
		{"bomb", abi.ErrMemory, "handler exceeded its memory limit: ", true, ""},
	}
	for _, tc := range cases {
		t.Run(tc.cmd, func(t *testing.T) {
			s := s
			if tc.cmd == "bomb" {
				s = bomber
			}
			in, inits := s.in, h.Calls(abi.FnWatch)
			err := s.Handle(ctx, command(tc.cmd))
			if !errors.Is(err, tc.is) {
				t.Fatalf("Handle: %v; want an error wrapping %v", err, tc.is)
			}
			if want := `rule.wasm: SET "` + tc.cmd + `": ` + tc.msg; !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error\n got %s\nwant %s...", err, want)
			}
			if tc.log != "" && !hasLog(h, abi.LevelError, tc.log) {
				t.Errorf("no error log line starting %q: %v", tc.log, h.Logs())
			}
			if err := s.Handle(ctx, command("echo", tc.cmd, "after")); err != nil {
				t.Fatalf("next event: %v", err)
			}
			if got, _ := h.Value("echo/" + tc.cmd); string(got) != "after" {
				t.Fatalf("next event stored %q, want after", got)
			}
			if replaced := s.in != in; replaced != tc.replaced {
				t.Errorf("instance replaced = %t, want %t", replaced, tc.replaced)
			}
			if want := inits + map[bool]int{true: 1}[tc.replaced]; h.Calls(abi.FnWatch) != want {
				t.Errorf("init ran %d times, want %d", h.Calls(abi.FnWatch)-inits, want-inits)
			}
		})
	}
	close(stop)
	wg.Wait()
	if otherErr != nil || handled.Load() == 0 {
		t.Fatalf("second script: %d events handled, error %v", handled.Load(), otherErr)
	}
	if !hasLog(h, abi.LevelWarn, "fatal error: out of memory") {
		t.Errorf("the Go runtime's out-of-memory report did not reach the log at warn")
	}
}

func hasLog(h *abitest.Host, level int32, prefix string) bool {
	for _, l := range h.Logs() {
		if l.Level == level && strings.HasPrefix(l.Msg, prefix) {
			return true
		}
	}
	return false
}

// TestScriptsRunConcurrently: while one Script is stuck in a loop, another
// handles events (no runtime-wide lock).
func TestScriptsRunConcurrently(t *testing.T) {
	h := abitest.New()
	s := ruleScript(t, h, abi.Limits{CallTimeout: time.Minute})
	other := abitest.New()
	s2 := ruleScript(t, other, abi.Limits{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Handle(ctx, command("loop")) }()
	testutil.WaitFor(t, "the rule to start looping", func() bool { return len(reports(h)) > 0 })
	for i := range 3 {
		if err := s2.Handle(context.Background(), command("echo", "k", strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the looping handler returned (%v) before the other script finished; scripts did not overlap", err)
	default:
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("looping handler: %v", err)
	}
}

// TestHandleCanceled: a context already done fails the call without
// touching the instance; one canceled during the call stops it.
func TestHandleCanceled(t *testing.T) {
	h := abitest.New()
	s := ruleScript(t, h, abi.Limits{CallTimeout: time.Minute})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	in := s.in
	if err := s.Handle(ctx, command("echo", "k", "v")); !errors.Is(err, context.Canceled) {
		t.Fatalf("Handle with a canceled context: %v", err)
	}
	if s.in != in {
		t.Fatal("instance replaced after a call that never started")
	}

	ctx, cancel = context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Handle(ctx, command("loop")) }()
	testutil.WaitFor(t, "the rule to start looping", func() bool { return len(reports(h)) > 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) || errors.Is(err, abi.ErrCrashed) {
		t.Fatalf("Handle canceled mid-call: %v", err)
	}
	if err := s.Handle(context.Background(), command("echo", "k", "v")); err != nil {
		t.Fatalf("next event: %v", err)
	}
}

// TestOutput: stdout and stderr reach Host.Log line by line, at info and
// warn; a partial line is flushed when the call ends.
func TestOutput(t *testing.T) {
	h := abitest.New()
	s := ruleScript(t, h, abi.Limits{})
	n := len(h.Logs())
	if err := s.Handle(context.Background(), command("print")); err != nil {
		t.Fatal(err)
	}
	got := h.Logs()[n:]
	want := map[string]int32{"out line 1": abi.LevelInfo, "out line 2": abi.LevelInfo, "partial": abi.LevelInfo, "err line": abi.LevelWarn}
	if len(got) != len(want) {
		t.Fatalf("log lines %v, want %v", got, want)
	}
	for _, l := range got {
		if lvl, ok := want[l.Msg]; !ok || lvl != l.Level {
			t.Errorf("unexpected log line %+v", l)
		}
	}
}

// TestSandbox: real clocks and sleep, real randomness, argv = rule name, no
// environment, no filesystem.
func TestSandbox(t *testing.T) {
	var got [2]string
	var before, after time.Time
	for i := range got {
		h := abitest.New()
		s := ruleScript(t, h, abi.Limits{})
		before = time.Now()
		got[i] = run(t, s, h, command("env"))
		after = time.Now()
	}
	parse := func(report string) map[string]string {
		m := map[string]string{}
		for _, f := range strings.Fields(report) {
			if k, v, ok := strings.Cut(f, "="); ok {
				m[k] = v
			}
		}
		return m
	}
	r0, r1 := parse(got[0]), parse(got[1])
	args, environ, fs, randErr, rnd := r1["args"], r1["environ"], r1["fs"], r1["randerr"], r1["rand"]
	now, err1 := strconv.ParseInt(r1["now"], 10, 64)
	slept, err2 := strconv.ParseInt(r1["slept"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("parse %q: %v", got[1], err)
	}
	if args != `["rule.wasm"]` || environ != "0" || fs != "false" || randErr != "<nil>" {
		t.Errorf("args %s environ %s fs %s randerr %s; want [\"rule.wasm\"], 0, false, <nil>", args, environ, fs, randErr)
	}
	if guestNow := time.Unix(0, now); guestNow.Before(before.Add(-time.Second)) || guestNow.After(after.Add(time.Second)) {
		t.Errorf("guest wall clock %v, host's %v..%v", guestNow, before, after)
	}
	if slept < int64(20*time.Millisecond) {
		t.Errorf("time.Sleep(20ms) took %v by the guest's monotonic clock", time.Duration(slept))
	}
	if len(rnd) != 32 || r0["rand"] == rnd {
		t.Errorf("two instances drew the same random bytes %s: randomness is not real", rnd)
	}
}
