package bench

import (
	"context"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
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

// BenchmarkPluginLatency is change-to-write latency, one change at a time:
// the user client SETs a rule's in key, and the time runs until a watching
// client is notified of the rule's write of the same value to its out key.
// Subjects: the BASELINE (the Go handler on its own client of
// BenchmarkRuleThroughput), the host with the native Go rule (what the host
// adds), and the plugin rule (bench/testdata/pluginrule, on its session).
// They take turns change by change, so all see the same machine load; one
// op is one change of each. Reports <subject>-p50-us and -p99-us, and
// plugin-p50-x-base and plugin-p99-x-base.
func BenchmarkPluginLatency(b *testing.B) {
	e := newEnv(b, host.RuleConfig{})
	startNativeClient(b, e.addr, e.log)
	e.load("rule.native", []byte("A"), false)
	e.load("pluginrule", readFile(b, pluginRule(b)), true)
	subjects := []struct{ name, in, out string }{{"baseline", "go/in", "go/out"}, {"host-native", "native/in", "native/out"}, {"plugin", "plugin/in", "plugin/out"}}
	watcher := dial(b, e.addr, "watcher", e.log)
	seen := make(chan protocol.Event, 16)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-watcher.Events():
				if !ok {
					return
				}
				if ev.Kind == protocol.EventNotify {
					select {
					case seen <- ev:
					case <-ctx.Done():
						return
					}
				}
			}
		}
	}()
	b.Cleanup(func() { cancel(); <-done }) // before the watcher closes
	for _, s := range subjects {
		kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := watcher.KeyNotify(kctx, []byte(s.out), protocol.CallOptions{})
		kcancel()
		if err != nil {
			b.Fatalf("keynotify %s: %v", s.out, err)
		}
	}
	change := func(i int, in, out string) time.Duration {
		value := []byte(strconv.Itoa(i))
		t0 := time.Now()
		cctx, ccancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer ccancel()
		if _, err := e.user.Set(cctx, []byte(in), value, protocol.SetOptions{}); err != nil {
			b.Fatalf("set %s: %v", in, err)
		}
		for {
			select {
			case ev := <-seen:
				if string(ev.Key) == out && string(ev.Value) == string(value) {
					return time.Since(t0)
				}
			case <-cctx.Done():
				b.Fatalf("%s = %s not written within 10s", out, value)
			}
		}
	}
	for i := range 50 { // warm up
		for _, s := range subjects {
			change(i, s.in, s.out)
		}
	}
	lat := make([][]time.Duration, len(subjects))
	b.ResetTimer()
	for i := range b.N {
		for k := range subjects {
			j := (i + k) % len(subjects)
			lat[j] = append(lat[j], change(1000+i, subjects[j].in, subjects[j].out))
		}
	}
	b.StopTimer()
	pct := func(d []time.Duration, p float64) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[min(len(d)-1, int(p*float64(len(d))))]
	}
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	for k, s := range subjects {
		b.ReportMetric(us(pct(lat[k], 0.5)), s.name+"-p50-us")
		b.ReportMetric(us(pct(lat[k], 0.99)), s.name+"-p99-us")
	}
	b.ReportMetric(float64(pct(lat[2], 0.5))/float64(pct(lat[0], 0.5)), "plugin-p50-x-base")
	b.ReportMetric(float64(pct(lat[2], 0.99))/float64(pct(lat[0], 0.99)), "plugin-p99-x-base")
}
