package bench

import (
	"context"
	"os/exec"
	"testing"

	"github.com/hashicorp/go-hclog"
	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
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
