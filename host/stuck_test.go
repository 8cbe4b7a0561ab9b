package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// stuckRuntime is a runtime that ignores its contexts and deadlines, as a
// runtime with a bug, or a guest sleeping where its runtime cannot
// interrupt it, would. A rule file "x.stuck" holds the one step where its
// rule blocks ("compile", "start", "handle" or "close"), or "ok"; it blocks
// there until the test releases every rule of the runtime. Its rules watch
// "k", take the lock "held" when they start, and (unless blocked) answer an
// event on k by writing its value to "out".
type stuckRuntime struct {
	release chan struct{}
	blocked chan string // one "<step> <file>" per call that blocked
	once    sync.Once
}

func newStuckRuntime() *stuckRuntime {
	return &stuckRuntime{release: make(chan struct{}), blocked: make(chan string, 16)}
}

func (rt *stuckRuntime) unblock() { rt.once.Do(func() { close(rt.release) }) }

// block waits for the test's release, whatever ctx says.
func (rt *stuckRuntime) block(step, file string) {
	rt.blocked <- step + " " + filepath.Base(file)
	<-rt.release
}

func (rt *stuckRuntime) Kind() string                { return "stuck" }
func (rt *stuckRuntime) Close(context.Context) error { return nil }

func (rt *stuckRuntime) Compile(_ context.Context, file string, src []byte) (abi.Program, error) {
	step := strings.TrimSpace(string(src))
	if step == "compile" {
		rt.block(step, file)
	}
	return &stuckProgram{rt: rt, file: file, step: step}, nil
}

type stuckProgram struct {
	rt         *stuckRuntime
	file, step string
}

func (p *stuckProgram) Start(ctx context.Context, h abi.Host, _ abi.Limits) (abi.Script, error) {
	if err := h.Watch(ctx, "k", abi.WatchOptions{}); err != nil {
		return nil, err
	}
	if _, err := h.Lock(ctx, "held", time.Minute, abi.LockOptions{}); err != nil {
		return nil, err
	}
	if p.step == "start" {
		p.rt.block(p.step, p.file)
	}
	return &stuckScript{p: p, h: h}, nil
}

type stuckScript struct {
	p *stuckProgram
	h abi.Host
}

func (s *stuckScript) Handle(ctx context.Context, ev abi.Event) error {
	if s.p.step == "handle" {
		s.p.rt.block(s.p.step, s.p.file)
		return nil
	}
	_, err := s.h.Set(ctx, "out", ev.Value, abi.SetOptions{})
	return err
}

func (s *stuckScript) Close(context.Context) error {
	if s.p.step == "close" {
		s.p.rt.block(s.p.step, s.p.file)
	}
	return nil
}

// stuckEnv is an env whose host also runs stuckRuntime rules, with a short
// deadline and grace for them.
func stuckEnv(t *testing.T, opts ...func(*Config)) (*env, *stuckRuntime) {
	t.Helper()
	rt := newStuckRuntime()
	e := newEnv(t, append([]func(*Config){func(o *Config) {
		o.Runtimes = append(o.Runtimes, rt)
		o.Rules = map[string]RuleConfig{"*.stuck": {Timeout: 100 * time.Millisecond, Grace: 100 * time.Millisecond}}
		o.LoadTimeout = 200 * time.Millisecond
	}}, opts...)...)
	// Registered after the env's: it runs first, so the blocked calls end
	// before the env's host is closed and before the goroutine-leak check.
	t.Cleanup(rt.unblock)
	return e, rt
}

// writeStuck writes the rule file name.stuck that blocks in step.
func (e *env) writeStuck(name, step string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name+".stuck")
	if err := os.WriteFile(p, []byte(step), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// within runs f and fails the test unless it returns within bound, which is
// far beyond the deadlines and graces the test configures: the point is
// that f returns at all while a rule is blocked forever.
func within(t *testing.T, bound time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(bound):
		t.Fatalf("%s did not return within %v while a rule was blocked", what, bound)
	}
}

const stuckBound = 20 * time.Second

// waitBlocked waits until the runtime reports a call blocked in step.
func (rt *stuckRuntime) waitBlocked(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-rt.blocked:
		if got != want {
			t.Fatalf("blocked in %q, want %q", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("no call blocked in %q", want)
	}
}

// A handler that never returns does not hold up Remove: after its deadline
// plus the grace the rule is abandoned, its watches and lock are released
// by the host, and its goroutine is counted until it ends on its own.
func TestRemoveAbandonsStuckHandler(t *testing.T) {
	e, rt := stuckEnv(t)
	p := e.writeStuck("a", "handle")
	if err := e.host.Load(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	if _, ok := e.get("held"); !ok {
		t.Fatal("the rule's lock was not taken")
	}
	e.set("k", "1")
	rt.waitBlocked(t, "handle a.stuck")
	waitFor(t, "rule reported stuck", func() bool { return e.ruleStatus("a.stuck").Stuck })
	if s := e.ruleStatus("a.stuck"); s.State != StateStuck {
		t.Fatalf("state of a stuck rule: %q", s.State)
	}
	var err error
	within(t, stuckBound, "Remove", func() { err = e.host.Remove(e.ctx(), p) })
	if err != nil {
		t.Fatalf("remove: %v", err)
	}
	if n := e.host.Stats().WatchedKeys; n != 0 {
		t.Fatalf("watched keys after removing the stuck rule = %d", n)
	}
	if _, ok := e.get("held"); ok {
		t.Fatal("the stuck rule's lock was not released")
	}
	if len(e.logLines("rule abandoned", "a.stuck")) == 0 {
		t.Fatalf("abandonment not logged:\n%s", e.logs.String())
	}
	if n := e.host.Stats().Stuck; n != 1 {
		t.Fatalf("stuck goroutines = %d, want 1", n)
	}
	rt.unblock()
	waitFor(t, "abandoned goroutine ended", func() bool { return e.host.Stats().Stuck == 0 })
}

// Reloading a stuck rule replaces it: the new version takes over after the
// old one's deadline plus the grace, keeps its watches, and handles the next
// events; meanwhile other rules load.
func TestReloadReplacesStuckVersion(t *testing.T) {
	e, rt := stuckEnv(t)
	p := e.writeStuck("r", "handle")
	if err := e.host.Load(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	e.set("k", "1")
	rt.waitBlocked(t, "handle r.stuck")
	e.writeStuck("r", "ok")
	var err error
	within(t, stuckBound, "reload", func() { err = e.host.Load(e.ctx(), p) })
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	e.set("k", "2")
	e.waitValue("out", "2")
	within(t, stuckBound, "loading another rule", func() { e.load("other", goRule{init: watchInit("o")}) })
	s := e.ruleStatus("r.stuck")
	if s.Abandoned != 1 || s.Stuck || s.State != StateRunning || !strings.Contains(s.LastError, `abandoned SET "k"`) || len(s.Watches) != 1 || len(s.Locks) != 1 {
		t.Fatalf("status after replacing the stuck version: %+v", s)
	}
	if len(e.logLines("rule abandoned", "r.stuck")) == 0 {
		t.Fatalf("abandonment not logged:\n%s", e.logs.String())
	}
}

// Close returns with a stuck rule, names it, and releases its lock.
func TestCloseDoesNotWaitForStuckRule(t *testing.T) {
	e, rt := stuckEnv(t)
	if err := e.host.Load(e.ctx(), e.writeStuck("c", "handle")); err != nil {
		t.Fatal(err)
	}
	e.load("fine", goRule{init: watchInit("k")})
	e.set("k", "1")
	rt.waitBlocked(t, "handle c.stuck")
	var err error
	within(t, stuckBound, "Close", func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		err = e.host.Close(ctx)
	})
	if err == nil || !strings.Contains(err.Error(), "c.stuck") {
		t.Fatalf("Close with a stuck rule: %v, want an error naming c.stuck", err)
	}
	if _, ok := e.get("held"); ok {
		t.Fatal("the stuck rule's lock was not released")
	}
	rt.unblock()
}

// Compile, Start and a script's Close are bounded too: a load whose runtime
// does not return fails after the load timeout plus the grace, and the host
// goes on loading, removing and closing.
func TestRuntimeCallsAreBounded(t *testing.T) {
	for _, step := range []string{"compile", "start", "close"} {
		t.Run(step, func(t *testing.T) {
			e, rt := stuckEnv(t)
			p := e.writeStuck("s", step)
			var err error
			within(t, stuckBound, "Load", func() { err = e.host.Load(e.ctx(), p) })
			switch step {
			case "close":
				if err != nil {
					t.Fatal(err)
				}
				within(t, stuckBound, "Remove", func() { err = e.host.Remove(e.ctx(), p) })
				if err != nil {
					t.Fatal(err)
				}
				rt.waitBlocked(t, "close s.stuck")
			default:
				rt.waitBlocked(t, step+" s.stuck")
				var se *StuckError
				if !errors.As(err, &se) || !strings.Contains(err.Error(), "s.stuck") || !strings.Contains(err.Error(), step) {
					t.Fatalf("load blocked in %s: %v, want a *StuckError naming the file and the step", step, err)
				}
				if step == "start" {
					if _, ok := e.get("held"); ok {
						t.Fatal("the lock taken by the abandoned start was not released")
					}
				}
			}
			within(t, stuckBound, "loading another rule", func() { e.load("next", goRule{init: watchInit("n")}) })
			if n := e.host.Stats().Stuck; n != 1 {
				t.Fatalf("stuck goroutines = %d, want 1 (the %s call)", n, step)
			}
			rt.unblock()
			waitFor(t, "abandoned call ended", func() bool { return e.host.Stats().Stuck == 0 })
		})
	}
}

// While the dispatcher and other rules run, a stuck rule only stops itself:
// events for a healthy rule on the same key keep flowing.
func TestStuckRuleDoesNotStopOthers(t *testing.T) {
	e, rt := stuckEnv(t)
	if err := e.host.Load(e.ctx(), e.writeStuck("x", "handle")); err != nil {
		t.Fatal(err)
	}
	seen := e.loadValues("healthy", "k")
	for i := range 5 {
		e.set("k", fmt.Sprint(i))
	}
	rt.waitBlocked(t, "handle x.stuck")
	waitFor(t, "healthy rule handled every event", func() bool { return len(seen()) == 5 })
}

// loadValues loads the rule name, which watches key and keeps the value of
// each event it handles; the function returned gives those values so far.
func (e *env) loadValues(name, key string) func() []string {
	var mu sync.Mutex
	var seen []string
	e.load(name, goRule{init: watchInit(key), handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
		mu.Lock()
		defer mu.Unlock()
		seen = append(seen, string(ev.Value))
		return nil
	}})
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(seen)
	}
}
