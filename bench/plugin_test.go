package bench

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
)

// floorHandshake is testdata/grpcfloor's handshake.
var floorHandshake = goplugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "SSRUN_BENCH_FLOOR", MagicCookieValue: "grpc-floor"}

// floorPluginPath returns the path of the built testdata/grpcfloor.
func floorPluginPath(tb testing.TB) string {
	tb.Helper()
	return exe(tb, "grpcfloor")
}

// floorPlugin is the host side of testdata/grpcfloor.
type floorPlugin struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (floorPlugin) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error { return nil }

func (floorPlugin) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return struct{}{}, nil
}

// startFloor starts testdata/grpcfloor with the client settings of
// runtime/plugin (gRPC, AutoMTLS, unix socket) and returns its client, whose
// Ping is the bare gRPC unary floor of plugin calls. The process is killed
// when the test ends.
func startFloor(tb testing.TB) goplugin.ClientProtocol {
	tb.Helper()
	c := goplugin.NewClient(&goplugin.ClientConfig{
		HandshakeConfig:  floorHandshake,
		Plugins:          goplugin.PluginSet{"floor": floorPlugin{}},
		Cmd:              exec.Command(floorPluginPath(tb)),
		AllowedProtocols: []goplugin.Protocol{goplugin.ProtocolGRPC},
		AutoMTLS:         true,
		Logger:           hclog.NewNullLogger(),
	})
	tb.Cleanup(c.Kill)
	rpc, err := c.Client()
	if err != nil {
		tb.Fatalf("start grpc floor plugin: %v", err)
	}
	if _, err := rpc.Dispense("floor"); err != nil {
		tb.Fatalf("dispense grpc floor plugin: %v", err)
	}
	return rpc
}

// pluginAtEndFlow is the plugin rule's copy whose SET is sdk.SetAtEnd:
// the GET waits for its answer, the SET travels with the event's end
// (testdata/pluginrule, plugin/atend/in). handled is the plugin rule's
// count, which it shares with the plugin flow.
func pluginAtEndFlow(handled func() uint64) flow {
	return flow{"plugin-atend", "plugin/atend/in", "plugin/atend/out", handled}
}

// BenchmarkRuleCPU runs BenchmarkRuleThroughput's subjects the same way
// (chunks of 500 events, 64 SETs in flight, the order rotating each round)
// and reports what each costs rather than its rate alone, since on a
// loaded machine the rates, the baseline's too, follow the load: per
// event, the CPU time of this process (host, broker, clients) and of the
// plugin process while the subject's chunks ran, <subject>-cpu-us/ev, and
// their threads' context switches, <subject>-cs/ev (Linux), with
// <subject>-cpu-x-base = the baseline's CPU per event over the subject's
// (the rate it would reach against the baseline were the CPUs the
// bottleneck). The plugin process's CPU counts for every subject (it idles
// during the others'), and so does the broker's and the user client's.
func BenchmarkRuleCPU(b *testing.B) {
	const chunk, inflight = 500, 64
	prebuild(b, "A")
	e := newEnv(b, host.RuleConfig{Mailbox: 1 << 16})
	native := startNativeClient(b, e.addr, e.log)
	flows := append([]flow{{"baseline", "go/in", "go/out", native.handled.Load}}, e.hostFlows()...)
	for _, f := range flows {
		e.drive(f, 50, inflight)
	}
	var pid int
	for _, st := range e.plugin.Stats() {
		pid = st.Pid
	}
	if pid == 0 {
		b.Fatal("no plugin process")
	}
	costs := testutil.Interleaved(b, len(flows), chunk, func(int) int { return pid }, func(i, n int) time.Duration {
		return e.drive(flows[i], n, inflight)
	})
	elapsed := make([]time.Duration, len(flows))
	for i, c := range costs {
		elapsed[i] = c.Elapsed
	}
	testutil.ReportRates(b, elapsed, func(i int) string { return flows[i].name }, "-ev/s", "-x-base")
	if costs[0].CPU == 0 {
		return // no /proc
	}
	for i, f := range flows {
		b.ReportMetric(float64(costs[i].CPU.Nanoseconds())/1e3/float64(b.N), f.name+"-cpu-us/ev")
		b.ReportMetric(float64(costs[i].Switches)/float64(b.N), f.name+"-cs/ev")
		if i > 0 {
			b.ReportMetric(float64(costs[0].CPU)/float64(costs[i].CPU), f.name+"-cpu-x-base")
		}
	}
	e.checkClean()
}
