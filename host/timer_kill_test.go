package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol"
)

// Environment of the timer helper host: the test binary run again as a
// host process, so that a test can kill it with SIGKILL.
const (
	timerHelperEnv   = "SSRUN_HOST_TEST_TIMER_HELPER" // the broker's address
	timerHelperDir   = "SSRUN_HOST_TEST_TIMER_DIR"    // the rules folder
	timerHelperDelay = "SSRUN_HOST_TEST_TIMER_DELAY"  // the door timer's delay, in ms
)

// timerHelperHost runs a host on the broker named by timerHelperEnv with
// one rule, door.gorule, which arms the timer "door" when it starts and
// never finishes handling a TIMER event (so this host never records a
// firing). It prints "armed" once the rule is loaded, then waits to be
// killed.
func timerHelperHost() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, "timer helper host:", err)
		os.Exit(1)
	}
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	c, err := helperClient(ctx, os.Getenv(timerHelperEnv), "timer-helper", 0, quiet)
	if err != nil {
		fail(err)
	}
	delay, err := strconv.Atoi(os.Getenv(timerHelperDelay))
	if err != nil {
		fail(err)
	}
	rt := &goRuntime{}
	rt.register("door", goRule{
		init: func(ctx context.Context, h abi.Host) error {
			return h.Timer(ctx, "door", time.Duration(delay)*time.Millisecond, abi.TimerOptions{Payload: []byte("open-too-long")})
		},
		handle: func(ctx context.Context, _ abi.Host, _ abi.Event) error { <-ctx.Done(); return ctx.Err() },
	})
	h, err := New(Config{Store: c, Runtimes: []abi.Runtime{rt}, Logger: quiet,
		Defaults: RuleConfig{Timeout: time.Hour}})
	if err != nil {
		fail(err)
	}
	p := filepath.Join(os.Getenv(timerHelperDir), "door.gorule")
	if err := os.WriteFile(p, []byte("door"), 0o644); err != nil {
		fail(err)
	}
	if err := h.Load(ctx, p); err != nil {
		fail(err)
	}
	fmt.Println("armed")
	select {} // until killed
}

// startTimerHelper runs timerHelperHost on the broker at addr with the
// door timer's delay, and returns once it has armed it. The test's end
// kills it if it still runs.
func startTimerHelper(t *testing.T, addr string, delay time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), timerHelperEnv+"="+addr, timerHelperDir+"="+t.TempDir(),
		timerHelperDelay+"="+strconv.FormatInt(delay.Milliseconds(), 10))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
	})
	line, scanErr := bufio.NewReader(out).ReadString('\n')
	go func() {
		defer close(done)
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
	}()
	if scanErr != nil || strings.TrimSpace(line) != "armed" {
		t.Fatalf("timer helper host: %q, %v", line, scanErr)
	}
	return cmd
}

// A timer armed by a host that is then killed with SIGKILL fires once in
// the next host on the same store: at its deadline when that is still
// ahead (the new host's clock, a fake one, shows it does not fire before),
// at once and late when it passed while no host ran (the real clock).
func TestTimerSurvivesSIGKILL(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delay time.Duration
		fake  bool
	}{
		{"ahead", time.Hour, true},
		{"passed", 100 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := brokertest.Start(t)
			helper := startTimerHelper(t, b.Addr(), tc.delay)
			var opts []func(*Config)
			clock := newFakeTimerClock()
			if tc.fake {
				opts = append(opts, func(o *Config) { o.clock = clock })
			}
			e := newEnvAt(t, b.Addr(), opts...)
			deadline, _, payload, ok := e.record("door.gorule", "door")
			if !ok || payload != "open-too-long" {
				t.Fatalf("the helper's timer is not in the store (found %v, payload %q)", ok, payload)
			}
			if !tc.fake {
				waitFor(t, "the deadline to pass", func() bool { return time.Now().UnixMilli() > deadline })
			}
			if err := helper.Process.Kill(); err != nil { // SIGKILL
				t.Fatal(err)
			}
			if tc.fake {
				clock.set(deadline - 1000)
			}
			tr := &timerRule{name: "door.gorule", fired: make(chan firing, 100)}
			e.load("door", tr.rule())
			if tc.fake {
				if early := tr.sync(t); len(early) != 0 {
					t.Fatalf("fired a second before its deadline: %+v", early[0].ev)
				}
				clock.set(deadline)
			}
			f := tr.next(t)
			if f.ev.Key != "door" || string(f.ev.Value) != "open-too-long" || f.ev.Deadline != deadline || f.ev.Late == tc.fake {
				t.Fatalf("event %+v; want door, its payload, deadline %d, late %v", f.ev, deadline, !tc.fake)
			}
			if f.at < deadline {
				t.Fatalf("handled at %d, before its deadline %d", f.at, deadline)
			}
			e.waitGone("door.gorule", "door")
			if again := tr.sync(t); len(again) != 0 {
				t.Fatalf("fired twice: %+v", again[0].ev)
			}
		})
	}
}

// helperClient connects a helper host process's client to the broker at
// addr (timeout 0: the client's default).
func helperClient(ctx context.Context, addr, id string, timeout time.Duration, log *slog.Logger) (*protocol.Client, error) {
	c, err := protocol.New(ctx, protocol.Config{Servers: []string{addr}, ClientID: id, Logger: log, Timeout: timeout})
	if err != nil {
		return nil, err
	}
	if err := c.AwaitConnection(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}
