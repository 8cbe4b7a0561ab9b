package plugin

import (
	"context"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// The Host service's verbs of ABI revision 3: keys, watch_pattern and
// unwatch_pattern.

// Keys lists the keys matching a pattern. A limit outside 0 to
// abi.MaxKeysLimit is INVALID here, before the Host is asked; the pattern
// is the Host's to judge.
func (s *hostServer) Keys(ctx context.Context, req *pb.KeysRequest) (*pb.KeysResponse, error) {
	pattern := string(req.GetPattern())
	if l := req.GetLimit(); l < 0 || l > abi.MaxKeysLimit {
		return &pb.KeysResponse{Result: wire.Result(abi.Errorf(abi.StatusInvalid, "keys %q: limit %d out of range (0 for the default of %d, at most %d)",
			pattern, l, abi.DefaultKeysLimit, abi.MaxKeysLimit))}, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	keys, err := s.h.Keys(ctx, pattern, abi.KeysOptions{Limit: int(req.GetLimit())})
	if err != nil {
		return &pb.KeysResponse{Result: wire.Result(err)}, nil
	}
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return &pb.KeysResponse{Result: wire.Result(nil), Keys: out}, nil
}

func (s *hostServer) WatchPattern(ctx context.Context, req *pb.WatchPatternRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.WatchPattern(ctx, string(req.GetPattern()), abi.WatchOptions{Self: req.GetSelf()})), nil
}

func (s *hostServer) UnwatchPattern(ctx context.Context, req *pb.UnwatchPatternRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.UnwatchPattern(ctx, string(req.GetPattern()))), nil
}
