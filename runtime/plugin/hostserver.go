package plugin

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/wire"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// hostServer serves the Host service to one plugin process, backed by the
// rule's abi.Host. Arguments the ABI forbids (an unknown condition, a
// negative or oversized duration) fail with StatusInvalid before reaching
// the Host. An empty value or payload reaches the Host as empty, not nil. A call without a deadline (made outside Init and Handle) is
// bounded by the rule's call timeout.
type hostServer struct {
	pb.UnimplementedHostServer
	h       abi.Host
	timeout time.Duration
}

func (s *hostServer) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

func (s *hostServer) Get(ctx context.Context, req *pb.GetRequest) (*pb.GetResponse, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	v, err := s.h.Get(ctx, string(req.GetKey()))
	if err != nil {
		return &pb.GetResponse{Result: wire.Result(err)}, nil
	}
	return &pb.GetResponse{Result: wire.Result(nil), Value: v.Data, Version: []byte(v.Version)}, nil
}

func (s *hostServer) Set(ctx context.Context, req *pb.SetRequest) (*pb.SetResponse, error) {
	key := string(req.GetKey())
	if req.GetCond() > pb.Condition_CONDITION_NEX {
		return &pb.SetResponse{Result: wire.Result(abi.Errorf(abi.StatusInvalid,
			"set %q: unknown condition %d (want 0 none, 1 NX, 2 NEX)", key, req.GetCond()))}, nil
	}
	ttl, ok := wire.Duration(req.GetTtlMs())
	if !ok {
		return &pb.SetResponse{Result: wire.Result(abi.Errorf(abi.StatusInvalid, "set %q: ttl %d ms out of range", key, req.GetTtlMs()))}, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	version, err := s.h.Set(ctx, key, wire.NonNil(req.GetValue()), abi.SetOptions{Cond: abi.Condition(req.GetCond()), TTL: ttl, Fence: string(req.GetFence())})
	return &pb.SetResponse{Result: wire.Result(err), Version: []byte(version)}, nil
}

func (s *hostServer) Del(ctx context.Context, req *pb.DelRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.Del(ctx, string(req.GetKey()), abi.DelOptions{Fence: string(req.GetFence())})), nil
}

func (s *hostServer) VDel(ctx context.Context, req *pb.VDelRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.VDel(ctx, string(req.GetKey()), wire.NonNil(req.GetValue()), abi.DelOptions{Fence: string(req.GetFence())})), nil
}

func (s *hostServer) Watch(ctx context.Context, req *pb.WatchRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.Watch(ctx, string(req.GetKey()), abi.WatchOptions{Self: req.GetSelf()})), nil
}

func (s *hostServer) Unwatch(ctx context.Context, req *pb.UnwatchRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.Unwatch(ctx, string(req.GetKey()))), nil
}

func (s *hostServer) Lock(ctx context.Context, req *pb.LockRequest) (*pb.LockResponse, error) {
	name := string(req.GetName())
	ttl, ok := wire.Duration(req.GetTtlMs())
	if !ok {
		return &pb.LockResponse{Result: wire.Result(abi.Errorf(abi.StatusInvalid, "lock %q: ttl %d ms out of range", name, req.GetTtlMs()))}, nil
	}
	wait, ok := wire.Duration(req.GetWaitMs())
	if !ok {
		return &pb.LockResponse{Result: wire.Result(abi.Errorf(abi.StatusInvalid, "lock %q: wait %d ms out of range", name, req.GetWaitMs()))}, nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	token, err := s.h.Lock(ctx, name, ttl, abi.LockOptions{Wait: wait})
	if err != nil {
		return &pb.LockResponse{Result: wire.Result(err)}, nil
	}
	return &pb.LockResponse{Result: wire.Result(nil), Token: []byte(token)}, nil
}

func (s *hostServer) Unlock(ctx context.Context, req *pb.UnlockRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.Unlock(ctx, string(req.GetName()))), nil
}

func (s *hostServer) Log(_ context.Context, req *pb.LogRequest) (*pb.Result, error) {
	s.h.Log(req.GetLevel(), string(req.GetMessage()))
	return wire.Result(nil), nil
}

func (s *hostServer) Timer(ctx context.Context, req *pb.TimerRequest) (*pb.Result, error) {
	name := string(req.GetName())
	if req.GetDelayMs() < 0 || req.GetEveryMs() < 0 { // the words of abi.Host's refusal
		return wire.Result(abi.Errorf(abi.StatusInvalid, "timer %q: negative delay or period", name)), nil
	}
	delay, ok := wire.Duration(req.GetDelayMs())
	if !ok {
		return wire.Result(abi.Errorf(abi.StatusInvalid, "timer %q: delay %d ms out of range", name, req.GetDelayMs())), nil
	}
	every, ok := wire.Duration(req.GetEveryMs())
	if !ok {
		return wire.Result(abi.Errorf(abi.StatusInvalid, "timer %q: every %d ms out of range", name, req.GetEveryMs())), nil
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.Timer(ctx, name, delay, abi.TimerOptions{Every: every, Payload: wire.NonNil(req.GetPayload())})), nil
}

func (s *hostServer) Cancel(ctx context.Context, req *pb.CancelRequest) (*pb.Result, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	return wire.Result(s.h.Cancel(ctx, string(req.GetName()))), nil
}

func (s *hostServer) Now(context.Context, *pb.NowRequest) (*pb.NowResponse, error) {
	return &pb.NowResponse{Result: wire.Result(nil), UnixMs: s.h.Now()}, nil
}
