package plugin

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/runtime/plugin/internal/guest"
	"github.com/ssrun/ssrun/runtime/plugin/internal/plugintest"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
)

// The in-process plugin: the tests of what the ABI maps (verbs, events,
// errors, statuses, logs) need no plugin binary. They run the test rule's
// code (internal/plugintest) behind the SDK's own plugin side (internal/guest)
// in the test's process, connected to the runtime by go-plugin's
// TestPluginGRPCConn: a real gRPC connection with go-plugin's broker, over
// which the runtime serves the ABI callback as it does to a process. What
// only a process shows (starting, crashing, hanging, killing, output,
// process trees, and messages above gRPC's default 4 MiB, a limit the
// SDK's Serve lifts) is tested on the built test plugin (rulePlugin).

func init() {
	// TestPluginGRPCConn's go-plugin logger writes debug lines to hclog's
	// default output, stderr; the runtime's own go-plugin logger is not
	// hclog's (newHCLogger), so nothing else is lost.
	hclog.DefaultOutput = io.Discard
}

// inProcessScript starts the test rule served in-process on a runtime of
// its own, as ruleScript starts the built plugin; opts adjust the runtime
// first.
func inProcessScript(t testing.TB, h abi.Host, lim abi.Limits, opts ...func(*Runtime)) (*script, *Runtime, *testutil.Buffer) {
	t.Helper()
	return inProcessScriptOf(t, func() inProcessRule {
		rule := guest.New(plugintest.Init, plugintest.Handle)
		rule.Stderr = testutil.LogWriter(t) // a panic's stack
		return rule
	}, h, lim, opts...)
}

// inProcessRule is the plugin side of a rule served in-process; Close
// closes its connections to the host.
type inProcessRule interface {
	goplugin.GRPCPlugin
	Close()
}

// inProcessScriptOf starts the rule newRule makes (a new one per process
// start) served in-process on a runtime of its own; opts adjust the runtime
// first.
func inProcessScriptOf(t testing.TB, newRule func() inProcessRule, h abi.Host, lim abi.Limits, opts ...func(*Runtime)) (*script, *Runtime, *testutil.Buffer) {
	t.Helper()
	r, logs := newRuntime(t, Config{})
	for _, o := range opts {
		o(r)
	}
	r.connect = func(cfg *goplugin.ClientConfig) pluginClient {
		return serveInProcess(t, cfg.Plugins[wire.PluginName].(goplugin.GRPCPlugin), newRule())
	}
	// Compile and Start still check and copy a file: a stand-in that is
	// never run.
	file := filepath.Join(t.TempDir(), "rule")
	if err := os.WriteFile(file, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return start(t, compile(t, r, file), h, lim), r, logs
}

// serveInProcess serves rule on a go-plugin connection in this process;
// host is the runtime's side of the plugin.
func serveInProcess(t testing.TB, host goplugin.GRPCPlugin, rule inProcessRule) pluginClient {
	c, s := goplugin.TestPluginGRPCConn(t, false, goplugin.PluginSet{wire.PluginName: pair{host: host, rule: rule}})
	return &inProcess{t: t, client: c, server: s, rule: rule}
}

// pair is one go-plugin plugin made of the runtime's side (the client) and
// the rule's (the server), as TestPluginGRPCConn takes one set for both.
type pair struct {
	goplugin.NetRPCUnsupportedPlugin
	host, rule goplugin.GRPCPlugin
}

func (p pair) GRPCServer(b *goplugin.GRPCBroker, s *grpc.Server) error {
	return p.rule.GRPCServer(b, s)
}

func (p pair) GRPCClient(ctx context.Context, b *goplugin.GRPCBroker, c *grpc.ClientConn) (any, error) {
	return p.host.GRPCClient(ctx, b, c)
}

// inProcess is the pluginClient of a rule served in this process.
type inProcess struct {
	t      testing.TB
	client *goplugin.GRPCClient
	server *goplugin.GRPCServer
	rule   inProcessRule
}

func (p *inProcess) Client() (goplugin.ClientProtocol, error) { return p.client, nil }

// Kill closes the connection, whose shutdown call stops the server, waits
// for the server to end, and closes the rule's connection to the host.
func (p *inProcess) Kill() {
	_ = p.client.Close()
	select {
	case <-p.server.DoneCh:
	case <-time.After(testutil.WaitBound):
		p.t.Errorf("the in-process plugin's server has not stopped after %v", testutil.WaitBound)
	}
	p.rule.Close()
}

// TestInProcess: a rule served in-process runs its Init and events in the
// test's own process (no child process, no pid in Stats) until Close.
func TestInProcess(t *testing.T) {
	h := abitest.New()
	s, r, _ := inProcessScript(t, h, abi.Limits{})
	if _, ok := h.Watches()["init/watched"]; !ok {
		t.Errorf("init did not watch init/watched: %v", h.Watches())
	}
	if got := run(t, s, h, command("get", "k")); !strings.HasPrefix(got, "get status=NOT_FOUND ") {
		t.Errorf("get: %s", got)
	}
	if st := r.Stats(); len(st) != 1 || st[0].Pid != 0 || st[0].Starts != 1 {
		t.Errorf("stats %+v, want one script without a pid", st)
	}
	if c := children(t); len(c) != 0 {
		t.Errorf("child processes %v", c)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := r.Stats(); len(st) != 0 {
		t.Errorf("stats after Close: %+v", st)
	}
}
