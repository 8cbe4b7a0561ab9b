// Command grpcfloor is the floor of plugin calls in package bench: a
// go-plugin gRPC plugin that serves nothing of its own, so that the host's
// only call on it is go-plugin's health check, a bare gRPC unary round trip
// over the same kind of connection as an ssrun plugin's (unix socket,
// AutoMTLS). Its handshake is its own; bench/plugin_test.go has the host
// side.
package main

import (
	"context"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
)

func main() {
	goplugin.Serve(&goplugin.ServeConfig{
		HandshakeConfig: goplugin.HandshakeConfig{ProtocolVersion: 1, MagicCookieKey: "SSRUN_BENCH_FLOOR", MagicCookieValue: "grpc-floor"},
		Plugins:         goplugin.PluginSet{"floor": floor{}},
		GRPCServer:      goplugin.DefaultGRPCServer,
	})
}

// floor registers no service: the health service go-plugin adds is the
// floor.
type floor struct {
	goplugin.NetRPCUnsupportedPlugin
}

func (floor) GRPCServer(*goplugin.GRPCBroker, *grpc.Server) error { return nil }

func (floor) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return struct{}{}, nil
}
