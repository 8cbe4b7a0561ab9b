package plugin

import (
	"context"
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// hostCalls decode a request for each Host method and call it; the index
// is the fuzzer's method byte.
var hostCalls = []func(ctx context.Context, s *hostServer, data []byte) (proto.Message, error){
	call((*hostServer).Get), call((*hostServer).Set), call((*hostServer).Del), call((*hostServer).VDel),
	call((*hostServer).Watch), call((*hostServer).Unwatch), call((*hostServer).Lock), call((*hostServer).Unlock),
	call((*hostServer).Log), call((*hostServer).Timer), call((*hostServer).Cancel), call((*hostServer).Now),
	call((*hostServer).Keys), call((*hostServer).WatchPattern), call((*hostServer).UnwatchPattern),
}

func call[Req any, PReq interface {
	*Req
	proto.Message
}, Resp proto.Message](m func(*hostServer, context.Context, PReq) (Resp, error)) func(context.Context, *hostServer, []byte) (proto.Message, error) {
	return func(ctx context.Context, s *hostServer, data []byte) (proto.Message, error) {
		req := PReq(new(Req))
		if err := proto.Unmarshal(data, req); err != nil {
			return nil, nil // not a request: gRPC would refuse it before the server
		}
		return m(s, ctx, req)
	}
}

// FuzzHostServer feeds arbitrary requests (what a buggy or hostile plugin
// could send) to the host's callback service: it must never panic, never
// return a gRPC error, and answer with a defined status, with a message
// when it is not OK, in a response that marshals.
func FuzzHostServer(f *testing.F) {
	seeds := []proto.Message{
		&pb.GetRequest{Key: []byte("k\x00\xff")},
		&pb.SetRequest{Key: []byte("k"), Value: []byte("v"), Cond: 7, TtlMs: -1, Fence: []byte("L")},
		&pb.DelRequest{Key: []byte("k"), Fence: []byte("L")},
		&pb.VDelRequest{Key: []byte("k")},
		&pb.WatchRequest{Key: []byte("w"), Self: true},
		&pb.UnwatchRequest{Key: []byte("")},
		&pb.LockRequest{Name: []byte("L"), TtlMs: math.MaxInt64, WaitMs: -5},
		&pb.UnlockRequest{Name: []byte("L")},
		&pb.LogRequest{Level: 8, Message: []byte("\xff\xfe")},
		&pb.TimerRequest{Name: []byte("t\x00"), DelayMs: math.MaxInt64, EveryMs: -1, Payload: []byte("p")},
		&pb.CancelRequest{Name: []byte("t")},
		&pb.NowRequest{},
		&pb.KeysRequest{Pattern: []byte("k*"), Limit: math.MaxInt64},
		&pb.WatchPatternRequest{Pattern: []byte("["), Self: true},
		&pb.UnwatchPatternRequest{Pattern: []byte("k*")},
	}
	for i, m := range seeds {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(i), b)
	}
	f.Add(uint8(1), []byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f}) // truncated field
	f.Fuzz(func(t *testing.T, method uint8, data []byte) {
		h := ruletest.NewPatternHost("k", "k2", "$ssrun/x")
		h.Put("k", []byte("v"))
		_, _ = h.Lock(context.Background(), "L", time.Second, abi.LockOptions{})
		srv := &hostServer{h: h, timeout: time.Second}
		resp, err := hostCalls[int(method)%len(hostCalls)](context.Background(), srv, data)
		if err != nil {
			t.Fatalf("gRPC error: %v", err)
		}
		if resp == nil {
			return
		}
		res, ok := resp.(*pb.Result)
		if !ok {
			res = resp.(interface{ GetResult() *pb.Result }).GetResult()
		}
		st := abi.Status(res.GetStatus())
		if st < 0 || int(st) >= len(abi.Statuses()) {
			t.Fatalf("undefined status %d", st)
		}
		if st != abi.StatusOK && len(res.GetMessage()) == 0 {
			t.Fatalf("status %s without a message", st)
		}
		if _, err := proto.Marshal(resp); err != nil {
			t.Fatalf("response does not marshal: %v", err)
		}
	})
}
