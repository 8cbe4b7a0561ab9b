package guest

import (
	"context"

	"google.golang.org/grpc"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// The verbs of ABI revision 3, keys, watch_pattern and unwatch_pattern:
// remoteHost's methods, and streamClient's, which carry them up the
// session while an event runs. On a host older than revision 3 they fail
// with StatusInternal (the host answers gRPC's UNIMPLEMENTED, or a Result
// in place of the session's reply).

// Keys implements abi.Host.
func (h *remoteHost) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	res, err := h.c.Keys(ctx, &pb.KeysRequest{Pattern: []byte(pattern), Limit: int64(opts.Limit)})
	if err != nil {
		return nil, callErr(abi.FnKeys, pattern, err)
	}
	if err := wire.Err(res.GetResult()); err != nil {
		return nil, err
	}
	keys := make([]string, len(res.GetKeys()))
	for i, k := range res.GetKeys() {
		keys[i] = string(k)
	}
	return keys, nil
}

// WatchPattern implements abi.Host.
func (h *remoteHost) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	res, err := h.c.WatchPattern(ctx, &pb.WatchPatternRequest{Pattern: []byte(pattern), Self: opts.Self})
	if err != nil {
		return callErr(abi.FnWatchPattern, pattern, err)
	}
	return wire.Err(res)
}

// UnwatchPattern implements abi.Host.
func (h *remoteHost) UnwatchPattern(ctx context.Context, pattern string) error {
	res, err := h.c.UnwatchPattern(ctx, &pb.UnwatchPatternRequest{Pattern: []byte(pattern)})
	if err != nil {
		return callErr(abi.FnUnwatchPattern, pattern, err)
	}
	return wire.Err(res)
}

func (c *streamClient) Keys(ctx context.Context, in *pb.KeysRequest, opts ...grpc.CallOption) (*pb.KeysResponse, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_Keys{Keys: in}}, (*pb.HostReply).GetKeys,
		func() (*pb.KeysResponse, error) { return c.ss.unary.Keys(ctx, in, opts...) })
}

func (c *streamClient) WatchPattern(ctx context.Context, in *pb.WatchPatternRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_WatchPattern{WatchPattern: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.WatchPattern(ctx, in, opts...) })
}

func (c *streamClient) UnwatchPattern(ctx context.Context, in *pb.UnwatchPatternRequest, opts ...grpc.CallOption) (*pb.Result, error) {
	return roundTrip(c, ctx, &pb.HostCall{Verb: &pb.HostCall_UnwatchPattern{UnwatchPattern: in}}, (*pb.HostReply).GetResult,
		func() (*pb.Result, error) { return c.ss.unary.UnwatchPattern(ctx, in, opts...) })
}
