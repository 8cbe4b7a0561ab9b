package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// goRuntime is a runtime whose rules are Go functions, registered by name: a
// file "x.gorule" holds the name of its rule. It tests the host's mechanics
// without a sandbox (the Lua and WASM runtimes have their own end-to-end
// tests), and is the native baseline of the benchmarks.
type goRuntime struct {
	mu    sync.Mutex
	rules map[string]goRule
}

type goRule struct {
	init   func(ctx context.Context, h abi.Host) error
	handle func(ctx context.Context, h abi.Host, ev abi.Event) error
	closed func() // called by each of its scripts' Close, when set
}

func (rt *goRuntime) Kind() string { return "gorule" }

func (rt *goRuntime) register(name string, r goRule) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.rules == nil {
		rt.rules = map[string]goRule{}
	}
	rt.rules[name] = r
}

func (rt *goRuntime) Compile(_ context.Context, file string, src []byte) (abi.Program, error) {
	name := strings.TrimSpace(string(src))
	rt.mu.Lock()
	r, ok := rt.rules[name]
	rt.mu.Unlock()
	if !ok {
		return nil, &abi.CompileError{File: file, Line: 1, Msg: fmt.Sprintf("no rule named %q", name)}
	}
	return r, nil
}

func (rt *goRuntime) Close(context.Context) error { return nil }

func (r goRule) Start(ctx context.Context, h abi.Host, lim abi.Limits) (abi.Script, error) {
	if r.init != nil {
		if err := r.init(ctx, h); err != nil {
			return nil, err
		}
	}
	return &goScript{r: r, h: h, lim: lim.WithDefaults()}, nil
}

type goScript struct {
	r   goRule
	h   abi.Host
	lim abi.Limits
}

func (s *goScript) Handle(ctx context.Context, ev abi.Event) error {
	if s.r.handle == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.lim.CallTimeout)
	defer cancel()
	return s.r.handle(ctx, s.h, ev)
}

func (s *goScript) Close(context.Context) error {
	if s.r.closed != nil {
		s.r.closed()
	}
	return nil
}

// env is one embedded broker, a host on its own client, a rules folder, and
// a second client acting as the user.
type env struct {
	t      *testing.T
	addr   string
	client *protocol.Client
	user   *protocol.Client
	host   *Host
	rt     *goRuntime
	dir    string
	logs   *testutil.Buffer
}

var clientSeq atomic.Int64

func newClient(t testing.TB, addr string) *protocol.Client {
	t.Helper()
	c, err := protocol.New(context.Background(), protocol.Config{
		Servers:  []string{addr},
		ClientID: fmt.Sprintf("host-test-%d", clientSeq.Add(1)),
		Timeout:  5 * time.Second,
		Logger:   slog.New(slog.NewTextHandler(io.Discard, nil)),
		// A short, flat backoff: with the default (doubling to 30 s) a
		// test that cuts the network for a few seconds under load could
		// wait longer for the reconnection than its bound.
		ReconnectBackoff: func(n int) time.Duration { return time.Duration(min(n, 1)) * 20 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func newEnv(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	b := brokertest.Start(t)
	return newEnvAt(t, b.Addr(), opts...)
}

// newEnvAt builds a host on a broker (or proxy) at addr.
func newEnvAt(t *testing.T, addr string, opts ...func(*Config)) *env {
	t.Helper()
	e := &env{t: t, addr: addr, rt: &goRuntime{}, dir: t.TempDir(), logs: &testutil.Buffer{}}
	e.client = newClient(t, addr)
	e.user = newClient(t, addr)
	e.startHost(opts...)
	return e
}

// startHost makes e's host on e.client, with the options opts set, logging
// into e.logs and the test's log; it is closed when the test ends.
func (e *env) startHost(opts ...func(*Config)) {
	t := e.t
	t.Helper()
	o := Config{
		Store:    e.client,
		Runtimes: []abi.Runtime{e.rt},
		Logger:   slog.New(slog.NewTextHandler(io.MultiWriter(e.logs, testutil.LogWriter(t)), &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
	for _, f := range opts {
		f(&o)
	}
	h, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	e.host = h
	testutil.CloseAtEnd(t, "host", h.Close)
}

// load registers a Go rule and loads it from a file of the same name.
func (e *env) load(name string, r goRule) string {
	e.t.Helper()
	e.rt.register(name, r)
	p := filepath.Join(e.dir, name+".gorule")
	if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.host.Load(ctx, p); err != nil {
		e.t.Fatalf("load %s: %v", name, err)
	}
	return p
}

// awaitRelease blocks a test handler until release is closed, or its
// call's ctx ends (its error then).
func awaitRelease(ctx context.Context, release <-chan struct{}) error {
	select {
	case <-release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// write writes content to the file at p.
func (e *env) write(p, content string) {
	e.t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		e.t.Fatal(err)
	}
}

// reload writes content to the rule file at p and loads it.
func (e *env) reload(p, content string) {
	e.t.Helper()
	e.write(p, content)
	if err := e.host.Load(e.ctx(), p); err != nil {
		e.t.Fatalf("load %s: %v", p, err)
	}
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

func (e *env) set(key, value string) string {
	e.t.Helper()
	res, err := e.user.Set(e.ctx(), []byte(key), []byte(value), protocol.SetOptions{})
	if err != nil {
		e.t.Fatalf("set %s: %v", key, err)
	}
	return res.Version.String()
}

func (e *env) get(key string) (string, bool) {
	e.t.Helper()
	res, err := e.user.Get(e.ctx(), []byte(key), protocol.CallOptions{})
	if err != nil {
		e.t.Fatalf("get %s: %v", key, err)
	}
	return string(res.Value), res.Found
}

// waitFor is testutil.WaitFor under the name this package's tests use.
var waitFor = testutil.WaitFor

func (e *env) waitValue(key, want string) {
	e.t.Helper()
	waitFor(e.t, fmt.Sprintf("%s = %q", key, want), func() bool {
		v, ok := e.get(key)
		return ok && v == want
	})
}

func (e *env) status(name string) RuleStatus {
	for _, s := range e.host.Status() {
		if filepath.Base(s.Path) == name+".gorule" {
			return s
		}
	}
	e.t.Fatalf("rule %s not loaded", name)
	return RuleStatus{}
}
