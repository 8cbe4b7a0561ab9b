package wire

import "google.golang.org/grpc"

// Window is the HTTP/2 flow-control window, per stream and per connection,
// of both ends of a plugin connection. It is static: gRPC's default
// dynamic window sizes itself with a BDP ping, which the receiver of a DATA
// frame sends whenever none is outstanding, preceded by a window update, and
// which the peer acknowledges. On a session, where one small message waits
// for another, that is almost every message: a third more frames and
// socket reads and writes in both processes, and another wake-up of the
// peer's reader, for a window that a unix socket with microseconds of round
// trip never needs to grow. 4 MiB lets a large value stream at the socket's
// pace (the receiver grants more each quarter window it reads).
const Window = 4 << 20

// DialOptions are the gRPC options of the end that dials (the host, to the
// plugin's Rule service; the plugin, to the host's Host service): static
// flow-control windows (see Window).
func DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithStaticStreamWindowSize(Window), grpc.WithStaticConnWindowSize(Window)}
}

// ServerOptions are the gRPC options of the end that serves (the plugin's
// Rule service, the host's Host service): static flow-control windows (see
// Window).
func ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{grpc.StaticStreamWindowSize(Window), grpc.StaticConnWindowSize(Window)}
}
