package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/examples/internal/ruletests"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/runtime/plugin"
)

// binDir holds the plugin binaries built for this test binary run.
var binDir = gobuild.Dir{Prefix: "batch-summary-test-"}

// binary returns this example built with main.version set to version, as
// the README says (go build), once per test binary run.
func binary(t *testing.T, version string) []byte {
	t.Helper()
	path, err := binDir.Exe("batch-summary-"+version, ".", "-X main.version="+version)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// env is an embedded broker, a host with the plugin runtime, a rules
// folder, and a second client acting as the user.
type env struct {
	t    *testing.T
	rt   *plugin.Runtime
	host *host.Host
	user *protocol.Client
	rule string // path of the plugin in the rules folder
}

var clientSeq atomic.Int64

func newClient(t *testing.T, addr string) *protocol.Client {
	t.Helper()
	return examplehost.Client(t, addr, fmt.Sprintf("batch-summary-test-%d", clientSeq.Add(1)),
		func(c *protocol.Config) { c.Timeout = 5 * time.Second })
}

func newEnv(t *testing.T, cfg host.RuleConfig) *env {
	t.Helper()
	b := brokertest.Start(t)
	logger := slog.New(slog.NewTextHandler(testutil.LogWriter(t), &slog.HandlerOptions{Level: slog.LevelInfo}))
	rt, err := plugin.New(plugin.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(host.Config{Store: newClient(t, b.Addr()), Runtimes: []abi.Runtime{rt}, Logger: logger, Defaults: cfg})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, rt: rt, host: h, user: newClient(t, b.Addr()), rule: filepath.Join(t.TempDir(), "batch-summary")}
	testutil.CloseAtEnd(t, "runtime", rt.Close)
	testutil.CloseAtEnd(t, "host", h.Close) // first
	return e
}

func (e *env) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	e.t.Cleanup(cancel)
	return ctx
}

// install writes the plugin binary into the rules folder and loads it.
func (e *env) install(bin []byte) {
	e.t.Helper()
	if err := os.WriteFile(e.rule, bin, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := e.host.Load(e.ctx(), e.rule); err != nil {
		e.t.Fatalf("load: %v", err)
	}
}

func (e *env) set(key, value string) {
	e.t.Helper()
	if _, err := e.user.Set(e.ctx(), []byte(key), []byte(value), protocol.SetOptions{}); err != nil {
		e.t.Fatalf("set %s: %v", key, err)
	}
}

func (e *env) del(key string) {
	e.t.Helper()
	if _, err := e.user.Del(e.ctx(), []byte(key), protocol.DelOptions{}); err != nil {
		e.t.Fatalf("del %s: %v", key, err)
	}
}

func (e *env) summary() (summary, bool) {
	e.t.Helper()
	res, err := e.user.Get(e.ctx(), []byte(summaryKey), protocol.CallOptions{})
	if err != nil {
		e.t.Fatalf("get %s: %v", summaryKey, err)
	}
	var s summary
	if res.Found {
		if err := json.Unmarshal(res.Value, &s); err != nil {
			e.t.Fatalf("%s holds %q: %v", summaryKey, res.Value, err)
		}
	}
	return s, res.Found
}

// waitSummary waits (up to 10 s) for the summary to satisfy ok.
func (e *env) waitSummary(what string, ok func(s summary) bool) summary {
	e.t.Helper()
	var last summary
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		s, found := e.summary()
		if found && ok(s) {
			return s
		}
		last = s
	}
	e.t.Fatalf("timed out waiting for the summary to show %s; last %+v", what, last)
	return last
}

// stats returns the plugin runtime's counters of the rule's running script.
func (e *env) stats() plugin.Stats {
	e.t.Helper()
	var out []plugin.Stats
	for _, s := range e.rt.Stats() {
		if s.Path == e.rule {
			out = append(out, s)
		}
	}
	if len(out) != 1 {
		e.t.Fatalf("%d running scripts for %s, want 1: %+v", len(out), e.rule, out)
	}
	return out[0]
}

func (e *env) status() host.RuleStatus {
	e.t.Helper()
	for _, s := range e.host.Status() {
		if s.Path == e.rule {
			return s
		}
	}
	e.t.Fatalf("rule %s not loaded", e.rule)
	return host.RuleStatus{}
}

func values(s summary) string {
	b, _ := json.Marshal(s.Values)
	return string(b)
}

// TestSummary: the plugin reacts to key changes and writes the summary
// through the ABI.
func TestSummary(t *testing.T) {
	e := newEnv(t, host.RuleConfig{})
	e.set("sensor/1", "10")
	e.install(binary(t, "dev"))
	// Init read sensor/1 from the store.
	e.waitSummary("sensor/1 from init", func(s summary) bool { return s.Count == 1 && s.Values["sensor/1"] == 10 })

	e.set("sensor/2", "20")
	e.set("sensor/3", " 30\n")
	got := e.waitSummary("three sensors", func(s summary) bool { return s.Count == 3 })
	want := `{"count":3,"max":30,"mean":20,"min":10,"values":{"sensor/1":10,"sensor/2":20,"sensor/3":30},"version":"dev"}`
	if b, _ := json.Marshal(got); string(b) != want {
		t.Errorf("summary %s\nwant    %s", b, want)
	}

	e.set("sensor/2", "not a number")
	e.del("sensor/3")
	e.set("other/key", "5") // not watched
	e.waitSummary("sensor/1 only", func(s summary) bool {
		return values(s) == `{"sensor/1":10}` && *s.Min == 10 && *s.Max == 10 && *s.Mean == 10
	})
	e.del("sensor/1")
	e.waitSummary("no sensor", func(s summary) bool { return s.Count == 0 && s.Min == nil && len(s.Values) == 0 })
}

// TestKillMidStream kills the plugin process (SIGKILL) while a stream of
// changes arrives: it is restarted, its init rebuilds the state, and
// handling continues. Every change sent is accounted for: handled, failed
// (the event in flight when the process died, reported as lost by the
// runtime), coalesced (the rule's mailbox, bounded at 8, was full while
// the plugin restarted, and kept the latest of the key) or dropped; and the
// summary ends at the last value sent.
func TestKillMidStream(t *testing.T) {
	e := newEnv(t, host.RuleConfig{Mailbox: 8})
	e.install(binary(t, "dev"))
	e.waitSummary("the first summary", func(s summary) bool { return s.Count == 0 })
	pid1 := e.stats().Pid

	const n = 60
	for i := 1; i <= n; i++ {
		e.set("sensor/1", strconv.Itoa(i))
		if i == 20 {
			if err := testutil.Kill(pid1); err != nil {
				t.Fatal(err)
			}
		}
	}
	testutil.ProcessGone(t, pid1)
	var st host.RuleStatus
	testutil.WaitFor(t, "every change to be handled, failed, coalesced or dropped", func() bool {
		st = e.status()
		return st.Handled+st.Failed+st.Coalesced+st.Dropped == n
	})
	ps := e.stats()
	t.Logf("sent %d: handled %d, failed %d, coalesced %d, dropped %d; runtime: lost %d, exits %d, starts %d", n, st.Handled, st.Failed, st.Coalesced, st.Dropped, ps.Lost, ps.Exits, ps.Starts)
	e.waitSummary("the last value sent", func(s summary) bool { return s.Values["sensor/1"] == n })
	if ps.Lost != st.Failed || ps.Lost > 1 {
		t.Errorf("runtime lost %d events, host counted %d failures; want equal and at most 1 (one event at a time)", ps.Lost, st.Failed)
	}
	if ps.Exits != 1 || ps.Starts != 2 || ps.Pid == pid1 || ps.Pid == 0 {
		t.Errorf("runtime stats %+v; want one exit and a restart", ps)
	}
	// Handling continues in the new process.
	e.set("sensor/2", "1000")
	e.waitSummary("sensor/2 after the restart", func(s summary) bool { return s.Values["sensor/2"] == 1000 })
}

// TestHotReload writes a new build over the plugin file and loads it: the
// new version's behaviour shows and the old process is gone.
func TestHotReload(t *testing.T) {
	e := newEnv(t, host.RuleConfig{})
	e.set("sensor/1", "1")
	e.install(binary(t, "dev"))
	e.waitSummary("v1", func(s summary) bool { return s.Version == "dev" && s.Count == 1 })
	pid1 := e.stats().Pid

	e.install(binary(t, "v2"))
	e.waitSummary("the new version", func(s summary) bool { return s.Version == "v2" && s.Count == 1 })
	testutil.ProcessGone(t, pid1)
	if pid2 := e.stats().Pid; pid2 == pid1 {
		t.Fatalf("still pid %d after the reload", pid1)
	}
	e.set("sensor/2", "3")
	e.waitSummary("an event handled by the new version", func(s summary) bool { return s.Version == "v2" && s.Count == 2 })
	if st := e.status(); st.Failed != 0 || len(st.Watches) != 3 {
		t.Errorf("status after reload %+v", st)
	}
}

// TestHostCloseStopsPlugin: closing the host stops the plugin process.
func TestHostCloseStopsPlugin(t *testing.T) {
	e := newEnv(t, host.RuleConfig{})
	e.install(binary(t, "dev"))
	pid := e.stats().Pid
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	testutil.ProcessGone(t, pid)
	if st := e.rt.Stats(); len(st) != 0 {
		t.Errorf("scripts still running after the host closed: %+v", st)
	}
}

// TestSummaryTestFile runs testdata/batch-summary.test.yaml (`ssrun test`,
// on an in-memory store) on the plugin built as the README says.
func TestSummaryTestFile(t *testing.T) {
	rules := t.TempDir()
	if err := os.WriteFile(filepath.Join(rules, "batch-summary"), binary(t, "test"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt, err := plugin.New(plugin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rt.Close(context.Background()) })
	ruletests.Run(t, rules, "testdata/batch-summary.test.yaml", rt)
}
