package wasm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// stuckBound bounds a guest call the runtime must stop: far below the
// sleeps the guests ask for (30 s, 1 h), far above their deadlines (1 s)
// and any delay of a loaded machine.
const stuckBound = 20 * time.Second

// goCall runs call in a goroutine; await collects its error.
func goCall(call func() error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- call() }()
	return done
}

// await returns the error of a call started by goCall, failing the test if
// it is still running after stuckBound. The goroutine is then left behind,
// blocked, and so would be anything waiting for it: tests close their
// scripts only once the call returned.
func await(t *testing.T, what string, done <-chan error) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(stuckBound):
		t.Fatalf("%s: still running after %v", what, stuckBound)
		return nil
	}
}

// returns runs call and returns its error, failing the test as await does.
func returns(t *testing.T, what string, call func() error) error {
	t.Helper()
	return await(t, what, goCall(call))
}

// startBare is start without the Cleanup: the caller closes the script once
// nothing can be stuck in it.
func startBare(t *testing.T, p abi.Program, h abi.Host, lim abi.Limits) *script {
	t.Helper()
	s, err := p.Start(context.Background(), h, lim)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	return s.(*script)
}

func closeScript(t *testing.T, s abi.Script) {
	t.Helper()
	if err := s.Close(context.Background()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// sleepEvent makes the sleeper guest's handler sleep for d.
func sleepEvent(d string) abi.Event { return abi.Event{Key: "sleep", Op: abi.OpSet, Value: []byte(d)} }

func sleeperProgram(t *testing.T, r *Runtime) abi.Program {
	t.Helper()
	return compile(t, r, "sleeper.wasm", guest(t, "sleeper"))
}

// slept returns the durations the sleeper guest logged as slept.
func slept(h *abitest.Host) []time.Duration {
	var out []time.Duration
	for _, l := range h.Logs() {
		if s, ok := strings.CutPrefix(l.Msg, "slept "); ok {
			if d, err := time.ParseDuration(s); err == nil {
				out = append(out, d)
			}
		}
	}
	return out
}

func sleeping(h *abitest.Host) bool {
	for _, l := range h.Logs() {
		if l.Msg == "sleeping" {
			return true
		}
	}
	return false
}

// TestSleepStoppedAtDeadline: a Go guest calling time.Sleep(30s) in its
// handler is stopped at its 1 s deadline, reported as a timeout, and its
// instance replaced; a sleep within the deadline really sleeps.
func TestSleepStoppedAtDeadline(t *testing.T) {
	h := abitest.New()
	s := startBare(t, sleeperProgram(t, sharedRuntime(t)), h, abi.Limits{CallTimeout: time.Second})
	in, inits := s.in, h.Calls(abi.FnGet)
	err := returns(t, "a handler sleeping 30 s under a 1 s deadline", func() error {
		return s.Handle(context.Background(), sleepEvent("30s"))
	})
	defer closeScript(t, s)
	if !errors.Is(err, abi.ErrTimeout) {
		t.Fatalf("Handle: %v; want %v", err, abi.ErrTimeout)
	}
	if want := `sleeper.wasm: SET "sleep": handler exceeded its deadline (limit 1s)`; err.Error() != want {
		t.Fatalf("error\n got %s\nwant %s", err, want)
	}
	if s.in != nil && s.in == in {
		t.Fatal("the instance stopped in its sleep was kept")
	}
	// The next event runs on a fresh instance, and may sleep within its
	// deadline: the guest's clock sees the time pass.
	if err := s.Handle(context.Background(), sleepEvent("10ms")); err != nil {
		t.Fatalf("next event: %v", err)
	}
	if h.Calls(abi.FnGet) != inits+1 {
		t.Errorf("init ran %d times after the timeout, want 1", h.Calls(abi.FnGet)-inits)
	}
	if d := slept(h); len(d) != 1 || d[0] < 10*time.Millisecond {
		t.Errorf("slept %v, want one sleep of at least 10ms", d)
	}
}

// TestSleepInInitStopped: a Go guest sleeping 30 s in its initialisation
// (Program.Start) is stopped at its 1 s deadline.
func TestSleepInInitStopped(t *testing.T) {
	p := sleeperProgram(t, sharedRuntime(t))
	h := abitest.New()
	h.Put("sleep/init", []byte("30s"))
	err := returns(t, "Start of a rule sleeping 30 s in init under a 1 s deadline", func() error {
		s, err := p.Start(context.Background(), h, abi.Limits{CallTimeout: time.Second})
		if err == nil {
			_ = s.Close(context.Background())
		}
		return err
	})
	if !errors.Is(err, abi.ErrTimeout) {
		t.Fatalf("Start: %v; want %v", err, abi.ErrTimeout)
	}
	if want := "sleeper.wasm: start: initialisation: handler exceeded its deadline (limit 1s)"; err.Error() != want {
		t.Fatalf("error\n got %s\nwant %s", err, want)
	}
}

// TestSleepCanceled: canceling the context of Handle or Start stops a guest
// sleeping within its deadline.
func TestSleepCanceled(t *testing.T) {
	lim := abi.Limits{CallTimeout: time.Minute}
	p := sleeperProgram(t, sharedRuntime(t))
	t.Run("Handle", func(t *testing.T) {
		h := abitest.New()
		s := startBare(t, p, h, lim)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := goCall(func() error { return s.Handle(ctx, sleepEvent("30s")) })
		testutil.WaitFor(t, "the guest to sleep", func() bool { return sleeping(h) })
		cancel()
		err := await(t, "a handler sleeping 30 s whose context was canceled", done)
		defer closeScript(t, s)
		if !errors.Is(err, context.Canceled) || errors.Is(err, abi.ErrCrashed) {
			t.Fatalf("Handle: %v; want %v", err, context.Canceled)
		}
		if err := s.Handle(context.Background(), sleepEvent("0s")); err != nil {
			t.Fatalf("next event: %v", err)
		}
	})
	t.Run("Start", func(t *testing.T) {
		h := abitest.New()
		h.Put("sleep/init", []byte("30s"))
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := goCall(func() error {
			s, err := p.Start(ctx, h, lim)
			if err == nil {
				_ = s.Close(context.Background())
			}
			return err
		})
		testutil.WaitFor(t, "the guest to sleep", func() bool { return sleeping(h) })
		cancel()
		err := await(t, "Start sleeping 30 s whose context was canceled", done)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Start: %v; want %v", err, context.Canceled)
		}
	})
}

// Hand-written guests that reach WASI's blocking points directly.

const (
	atSubs    = 0x1000 // poll_oneoff's subscriptions (48 bytes each)
	atEvents  = 0x2000 // its events (32 bytes each)
	atNevents = 0x3000 // its event count

	eventTypeClock  = 0
	eventTypeFdRead = 1
)

var (
	wasiPollOneoff = wImport{"wasi_snapshot_preview1", "poll_oneoff", sig(i32, i32, i32, i32), sig(i32)}
	wasiSchedYield = wImport{"wasi_snapshot_preview1", "sched_yield", nil, sig(i32)}
	wasiFdRead     = wImport{"wasi_snapshot_preview1", "fd_read", sig(i32, i32, i32, i32), sig(i32)}
)

// readStdin is code calling import 0, fd_read, for 16 bytes of stdin.
func readStdin() []byte {
	const atIovec, atBuf, atNread = 0x4000, 0x4100, 0x4200
	return ops(i32store(atIovec, atBuf), i32store(atIovec+4, 16),
		i32c(0), i32c(atIovec), i32c(1), i32c(atNread), call(0), opDrop)
}

func i32store(addr, v int32) []byte  { return ops(i32c(addr), i32c(v), []byte{0x36, 0x02, 0x00}) }
func i32store8(addr, v int32) []byte { return ops(i32c(addr), i32c(v), []byte{0x3a, 0x00, 0x00}) }
func i64store(addr int32, v int64) []byte {
	return ops(i32c(addr), i64c(v), []byte{0x37, 0x03, 0x00})
}

// subscription is one poll_oneoff subscription: a relative clock timeout,
// or a read on fd.
type subscription struct {
	eventType int32
	timeout   time.Duration
	fd        int32
}

// pollOneoff is code calling import 0, poll_oneoff, on subs (memory is
// zeroed: clock 0, relative, no user data).
func pollOneoff(subs ...subscription) []byte {
	var b []byte
	for i, s := range subs {
		at := atSubs + 48*int32(i)
		b = ops(b, i32store8(at+8, s.eventType))
		if s.eventType == eventTypeClock {
			b = ops(b, i64store(at+24, int64(s.timeout)))
		} else {
			b = ops(b, i32store(at+16, s.fd))
		}
	}
	return ops(b, i32c(atSubs), i32c(atEvents), i32c(int32(len(subs))), i32c(atNevents), call(0), opDrop)
}

// onEvent is minimal(imports...) whose ssrun_on_event runs body, then
// returns 0.
func onEvent(body []byte, imports ...wImport) wModule {
	return minimal(imports...).withFunc(wFunc{export: abi.ExportOnEvent, params: sig(i32, i32), results: sig(i32), body: ops(body, i32c(0))})
}

// TestBlockingWASI: every WASI call that can wait ends at the call's
// deadline, reported as a timeout: poll_oneoff on a clock (what sleep
// compiles to in every language), and a loop of sched_yield. A sleep
// within the deadline really sleeps. Reading or polling stdin does not
// wait: stdin is always at end of file.
func TestBlockingWASI(t *testing.T) {
	r := sharedRuntime(t)
	spinYield := ops([]byte{0x03, 0x40}, call(0), opDrop, []byte{0x0c, 0x00, 0x0b})
	cases := []struct {
		name   string
		module wModule
		is     error
		slept  time.Duration // the least the call takes when it succeeds
	}{
		{"poll_oneoff sleeping 1h", onEvent(pollOneoff(subscription{timeout: time.Hour}), wasiPollOneoff), abi.ErrTimeout, 0},
		{"poll_oneoff on two clocks", onEvent(pollOneoff(subscription{timeout: 2 * time.Hour}, subscription{timeout: time.Hour}), wasiPollOneoff), abi.ErrTimeout, 0},
		{"sched_yield loop", onEvent(spinYield, wasiSchedYield), abi.ErrTimeout, 0},
		{"poll_oneoff sleeping 50ms", onEvent(pollOneoff(subscription{timeout: 50 * time.Millisecond}), wasiPollOneoff), nil, 50 * time.Millisecond},
		{"poll_oneoff on stdin and 1h", onEvent(pollOneoff(subscription{eventType: eventTypeFdRead, fd: 0}, subscription{timeout: time.Hour}), wasiPollOneoff), nil, 0},
		{"fd_read on stdin", onEvent(readStdin(), wasiFdRead), nil, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := startBare(t, compile(t, r, "block.wasm", tc.module.bytes()), abitest.New(), abi.Limits{CallTimeout: time.Second})
			ev := abi.Event{Key: "k", Op: abi.OpDelete}
			began := time.Now()
			err := returns(t, tc.name+" under a 1 s deadline", func() error { return s.Handle(context.Background(), ev) })
			took := time.Since(began)
			defer closeScript(t, s)
			if tc.is == nil {
				if err != nil {
					t.Fatalf("Handle: %v", err)
				}
				if took < tc.slept {
					t.Fatalf("Handle took %v, less than the %v the guest slept", took, tc.slept)
				}
				return
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("Handle: %v; want %v", err, tc.is)
			}
			if want := `block.wasm: DELETE "k": handler exceeded its deadline (limit 1s)`; err.Error() != want {
				t.Fatalf("error\n got %s\nwant %s", err, want)
			}
			if err := s.Handle(context.Background(), ev); !errors.Is(err, tc.is) {
				t.Fatalf("the replaced instance: %v", err)
			}
		})
	}
}

// TestCompileSleepingInit: the load check (Compile, `ssrun check`) stops a
// module whose _initialize sleeps an hour at the default deadline, and
// rejects it.
func TestCompileSleepingInit(t *testing.T) {
	m := minimal(wasiPollOneoff).withFunc(wFunc{export: exportInitialize, body: pollOneoff(subscription{timeout: time.Hour})})
	r := newRuntime(t)
	err := returns(t, "Compile of a module sleeping 1 h in _initialize", func() error {
		_, err := r.Compile(context.Background(), "init.wasm", m.bytes())
		return err
	})
	var ce *abi.CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("Compile: %v; want an *abi.CompileError", err)
	}
	want := "init.wasm: initialisation failed during the load check (where store verbs other than watch, unwatch, watch_pattern, unwatch_pattern, log, timer, cancel and now fail with UNAVAILABLE): " +
		"handler exceeded its deadline (limit " + abi.DefaultCallTimeout.String() + ")"
	if err.Error() != want {
		t.Fatalf("error\n got %s\nwant %s", err, want)
	}
}

// TestCloseDuringStuckCall: Script.Close and Runtime.Close return while a
// guest sleeps within a long deadline, and stop it: the call returns
// ErrClosed.
func TestCloseDuringStuckCall(t *testing.T) {
	lim := abi.Limits{CallTimeout: time.Minute}
	for _, tc := range []struct {
		name  string
		close func(*Runtime, abi.Script) error
	}{
		{"Script.Close", func(_ *Runtime, s abi.Script) error { return s.Close(context.Background()) }},
		{"Runtime.Close", func(r *Runtime, _ abi.Script) error { return r.Close(context.Background()) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRuntime(t)
			h := abitest.New()
			s := startBare(t, sleeperProgram(t, r), h, lim)
			handled := goCall(func() error { return s.Handle(context.Background(), sleepEvent("30s")) })
			testutil.WaitFor(t, "the guest to sleep", func() bool { return sleeping(h) })
			if err := returns(t, tc.name+" during a 30 s sleep", func() error { return tc.close(r, s) }); err != nil {
				t.Fatalf("%s: %v", tc.name, err)
			}
			err := await(t, "the call stopped by "+tc.name, handled)
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("Handle: %v; want %v", err, ErrClosed)
			}
			closeScript(t, s)
		})
	}
}

// TestCloseDuringLoop: Runtime.Close stops a looping guest too, reported as
// closed.
func TestCloseDuringLoop(t *testing.T) {
	r := newRuntime(t)
	logThenSpin := ops(i32c(abi.LevelInfo), i32c(0), i32c(0), call(importIndex(abi.FnLog)), opDrop, opSpin, i32c(0))
	h := abitest.New()
	s := startBare(t, compile(t, r, "spin.wasm", handGuest(logThenSpin).bytes()), h, abi.Limits{CallTimeout: time.Minute})
	handled := goCall(func() error { return s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpDelete}) })
	testutil.WaitFor(t, "the guest to loop", func() bool { return len(h.Logs()) > 0 })
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := await(t, "the loop stopped by Runtime.Close", handled); !errors.Is(err, ErrClosed) {
		t.Fatalf("Handle: %v; want %v", err, ErrClosed)
	}
	closeScript(t, s)
}

// holdingLog is a slog.Handler that holds the first record with message msg
// (the goroutine logging it blocks) until release is closed, and closes
// held when it gets it.
type holdingLog struct {
	msg           string
	once          *sync.Once
	held, release chan struct{}
}

func newHoldingLog(msg string) holdingLog {
	return holdingLog{msg: msg, once: new(sync.Once), held: make(chan struct{}), release: make(chan struct{})}
}

func (h holdingLog) Enabled(context.Context, slog.Level) bool { return true }
func (h holdingLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h holdingLog) WithGroup(string) slog.Handler            { return h }

func (h holdingLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(func() {
			close(h.held)
			<-h.release
		})
	}
	return nil
}

// TestCompileDuringLoadCheck: while a load check runs (held inside the
// guest's _initialize, in a log call), a Compile of the same bytes waits
// for its verdict only as long as its own context lasts, and
// Runtime.Close returns at once; the held Compile then fails with
// ErrClosed.
func TestCompileDuringLoadCheck(t *testing.T) {
	logInInit := handGuest(nil).withFunc(wFunc{export: exportInitialize,
		body: ops(i32c(abi.LevelInfo), i32c(0), i32c(0), call(importIndex(abi.FnLog)), opDrop)}).bytes()
	setup := func(t *testing.T) (*Runtime, holdingLog, <-chan error) {
		hold := newHoldingLog("wasm: rule log during load check")
		r, err := New(Config{CacheDir: cacheDir(t), Logger: slog.New(hold)})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = r.Close(context.Background()) })
		first := goCall(func() error {
			_, err := r.Compile(context.Background(), "first.wasm", logInInit)
			return err
		})
		select {
		case <-hold.held:
		case err := <-first:
			t.Fatalf("Compile returned (%v) before its load check logged", err)
		}
		return r, hold, first
	}

	t.Run("second Compile canceled", func(t *testing.T) {
		r, hold, first := setup(t)
		ctx, cancel := context.WithCancel(context.Background())
		second := goCall(func() error {
			_, err := r.Compile(ctx, "second.wasm", logInInit)
			return err
		})
		cancel()
		err := func() error {
			defer close(hold.release)
			return await(t, "a canceled Compile waiting for another's load check", second)
		}()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("second Compile: %v; want %v", err, context.Canceled)
		}
		if err := await(t, "the first Compile", first); err != nil {
			t.Fatalf("first Compile: %v", err)
		}
	})

	t.Run("Runtime.Close", func(t *testing.T) {
		r, hold, first := setup(t)
		err := func() error {
			defer close(hold.release)
			return returns(t, "Runtime.Close during a load check", func() error { return r.Close(context.Background()) })
		}()
		if err != nil {
			t.Fatalf("Close: %v", err)
		}
		if err := await(t, "the Compile stopped by Close", first); !errors.Is(err, ErrClosed) {
			t.Fatalf("Compile: %v; want %v", err, ErrClosed)
		}
	})
}
