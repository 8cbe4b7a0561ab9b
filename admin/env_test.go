package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/lua"
)

// env is what `ssrun dev --admin` builds: an embedded broker, a host with
// the Lua runtime on a client that reaches the broker through a proxy the
// test can cut, and the admin endpoint with metrics and readiness.
type env struct {
	t      *testing.T
	broker *broker.Broker
	proxy  *testnet.Proxy
	client *protocol.Client
	user   *protocol.Client
	host   *host.Host
	srv    *admin.Server
	ready  *admin.RulesReady
	base   string // http://ADDR
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newEnv writes rules (file name -> Lua source) into a folder, loads them
// with cfg's per-rule settings, and starts the admin endpoint.
func newEnv(t *testing.T, rules map[string]string, cfg map[string]host.RuleConfig, allowFailed bool) *env {
	t.Helper()
	e := &env{t: t, broker: brokertest.Start(t), ready: &admin.RulesReady{AllowFailed: allowFailed}}
	e.proxy = testnet.NewProxy(t, e.broker.Addr())
	m := admin.NewMetrics()
	m.WatchBroker(e.broker)
	e.client = connect(t, e.proxy.Addr(), m)
	e.user = connect(t, e.broker.Addr(), nil)
	m.WatchClient(e.client)

	srv, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv.HandleOpen("GET /metrics", m.Handler())
	srv.ReadyCheck("store", admin.StoreReady(e.client))
	srv.ReadyCheck("rules", e.ready.Check)
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "admin server", srv.Close)
	e.srv, e.base = srv, "http://"+srv.Addr()

	h := luaHost(t, host.Config{Store: e.client, Rules: cfg, Observer: m})
	e.host = h
	loadRules(t, h, rules) // failures are what some tests look at
	e.ready.Loaded(h)
	m.WatchHost(h)
	return e
}

// luaHost starts a host of cfg with a Lua runtime of its own and a quiet
// logger; both are closed when the test ends.
func luaHost(t *testing.T, cfg host.Config) *host.Host {
	t.Helper()
	rt := lua.New(lua.Config{})
	cfg.Runtimes, cfg.Logger = []abi.Runtime{rt}, quiet
	h, err := host.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "host", func(ctx context.Context) error {
		err := h.Close(ctx)
		_ = rt.Close(ctx)
		return err
	})
	return h
}

// loadRules writes rules (file name -> source) into a new folder and loads
// it into h, ignoring the load's errors (Status and Stats show them).
func loadRules(t *testing.T, h *host.Host, rules map[string]string) {
	t.Helper()
	dir := t.TempDir()
	for name, src := range rules {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_ = h.LoadDir(ctx, dir)
}

func connect(t *testing.T, addr string, obs protocol.Observer) *protocol.Client {
	t.Helper()
	cfg := protocol.Config{
		Servers:          []string{addr},
		Logger:           quiet,
		ReconnectBackoff: func(n int) time.Duration { return time.Duration(min(n, 1)) * 20 * time.Millisecond },
	}
	if obs != nil {
		cfg.Observer = obs
	}
	c, err := protocol.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	return c
}

func (e *env) set(key, value string) {
	e.t.Helper()
	setKey(e.t, e.user, key, value)
}

// setKey sets key to value with the client c, failing t if it cannot.
func setKey(t *testing.T, c *protocol.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Set(ctx, []byte(key), []byte(value), protocol.SetOptions{}); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
}

// get fetches path, returning the status code and body.
func (e *env) get(path string) (int, string) {
	e.t.Helper()
	resp, err := http.Get(e.base + path)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// metric scrapes /metrics and returns the value of the series named name
// with the labels given as "k=v" (it must be exactly one), or -1 when there
// is none.
func (e *env) metric(name string, labels ...string) float64 {
	e.t.Helper()
	code, body := e.get("/metrics")
	if code != http.StatusOK {
		e.t.Fatalf("/metrics: %d %s", code, body)
	}
	return valueOf(e.t, body, name, labels...)
}

func valueOf(t *testing.T, body, name string, labels ...string) float64 {
	t.Helper()
	found, v := 0, -1.0
	for line := range strings.Lines(body) {
		series, value, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || strings.HasPrefix(series, "#") {
			continue
		}
		n, ls, _ := strings.Cut(series, "{")
		if n != name {
			continue
		}
		match := true
		for _, l := range labels {
			k, val, _ := strings.Cut(l, "=")
			if !strings.Contains(ls, k+`="`+val+`"`) {
				match = false
			}
		}
		if !match {
			continue
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("series %s: value %q: %v", series, value, err)
		}
		found, v = found+1, f
	}
	if found > 1 {
		t.Fatalf("%d series match %s %v", found, name, labels)
	}
	return v
}

// waitMetric waits until the series' value satisfies ok.
func (e *env) waitMetric(what string, ok func(float64) bool, name string, labels ...string) {
	e.t.Helper()
	deadline := time.Now().Add(testutil.WaitBound)
	for {
		v := e.metric(name, labels...)
		if ok(v) {
			return
		}
		if time.Now().After(deadline) {
			_, status := e.get("/status")
			e.t.Fatalf("timed out after %v waiting for %s: %s%v = %v\nstatus: %s", testutil.WaitBound, what, name, labels, v, status)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func eq(want float64) func(float64) bool      { return func(v float64) bool { return v == want } }
func atLeast(want float64) func(float64) bool { return func(v float64) bool { return v >= want } }
