package plugin

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	goplugin "github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// A plugin built against revision 1 of the plugin proto (before timers)
// must keep working on a newer host. Its proto is kept as it was, compiled
// to a descriptor set:
//
//	git show ce3b71c:runtime/plugin/proto/ssrun/plugin/v1/plugin.proto > R1/ssrun/plugin/v1/plugin.proto
//	protoc -I R1 --descriptor_set_out=testdata/plugin-revision1.binpb ssrun/plugin/v1/plugin.proto
//
// rev1Rule serves the Rule service with those messages (dynamicpb, so they
// do not clash with the generated code of today's proto linked in this
// binary) and calls the host with them: exactly the bytes a revision-1
// plugin sends and the way it reads what it receives.

//go:embed testdata/plugin-revision1.binpb
var rev1DescriptorSet []byte

// rev1Proto returns the revision-1 proto file.
func rev1Proto(t testing.TB) protoreflect.FileDescriptor {
	t.Helper()
	fd := protoFile(t, rev1DescriptorSet)
	if fd.Messages().ByName("TimerRequest") != nil || fd.Services().ByName("Host").Methods().ByName("Timer") != nil {
		t.Fatal("the revision-1 descriptor has timers")
	}
	return fd
}

// protoFile returns the proto file of a descriptor set.
func protoFile(t testing.TB, descriptorSet []byte) protoreflect.FileDescriptor {
	t.Helper()
	var set descriptorpb.FileDescriptorSet
	if err := proto.Unmarshal(descriptorSet, &set); err != nil {
		t.Fatal(err)
	}
	fd, err := protodesc.NewFile(set.GetFile()[0], new(protoregistry.Files))
	if err != nil {
		t.Fatal(err)
	}
	return fd
}

// rev1Rule is a revision-1 plugin: Init watches "w"; Handle copies the
// event's value to "copy/<key>" and logs "rev1 event op=<n> key=<key>
// value=<value> unknown=<bytes>", unknown being the size of the fields of
// the event it does not know.
type rev1Rule struct {
	goplugin.NetRPCUnsupportedPlugin
	fd protoreflect.FileDescriptor

	mu   sync.Mutex
	conn *grpc.ClientConn
}

func (p *rev1Rule) msg(name string) *dynamicpb.Message {
	return dynamicpb.NewMessage(p.fd.Messages().ByName(protoreflect.Name(name)))
}

// with returns m with its bytes or bool fields set as given.
func with(m *dynamicpb.Message, fields map[string]any) *dynamicpb.Message {
	for name, v := range fields {
		m.Set(m.Descriptor().Fields().ByName(protoreflect.Name(name)), protoreflect.ValueOf(v))
	}
	return m
}

// call calls the Host method with req and checks the Result in its
// response.
func (p *rev1Rule) call(ctx context.Context, method string, req *dynamicpb.Message, resp string) error {
	p.mu.Lock()
	conn := p.conn
	p.mu.Unlock()
	out := p.msg(resp)
	if err := conn.Invoke(ctx, "/ssrun.plugin.v1.Host/"+method, req, out); err != nil {
		return err
	}
	res := out
	if resp != "Result" {
		res = out.Get(out.Descriptor().Fields().ByName("result")).Message().Interface().(*dynamicpb.Message)
	}
	if st := res.Get(res.Descriptor().Fields().ByName("status")).Int(); st != 0 {
		return fmt.Errorf("%s: status %d: %s", method, st, res.Get(res.Descriptor().Fields().ByName("message")).Bytes())
	}
	return nil
}

// unary is the handler of a Rule method taking the message in and running f.
func (p *rev1Rule) unary(in string, f func(ctx context.Context, req *dynamicpb.Message) error) grpc.MethodHandler {
	return func(_ any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
		req := p.msg(in)
		if err := dec(req); err != nil {
			return nil, err
		}
		res := p.msg("Result")
		if err := f(ctx, req); err != nil {
			with(res, map[string]any{"message": []byte(err.Error())})
			res.Set(res.Descriptor().Fields().ByName("status"), protoreflect.ValueOfInt32(int32(abi.StatusInternal)))
		}
		return res, nil
	}
}

func (p *rev1Rule) GRPCServer(b *goplugin.GRPCBroker, s *grpc.Server) error {
	s.RegisterService(&grpc.ServiceDesc{ServiceName: "ssrun.plugin.v1.Rule", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{
		{MethodName: "Init", Handler: p.unary("InitRequest", func(ctx context.Context, req *dynamicpb.Message) error {
			conn, err := b.Dial(uint32(req.Get(req.Descriptor().Fields().ByName("host_broker_id")).Uint()))
			if err != nil {
				return err
			}
			p.mu.Lock()
			p.conn = conn
			p.mu.Unlock()
			return p.call(ctx, "Watch", with(p.msg("WatchRequest"), map[string]any{"key": []byte("w")}), "Result")
		})},
		{MethodName: "Handle", Handler: p.unary("HandleRequest", func(ctx context.Context, req *dynamicpb.Message) error {
			ev := req.Get(req.Descriptor().Fields().ByName("event")).Message()
			field := func(name string) protoreflect.Value {
				return ev.Get(ev.Descriptor().Fields().ByName(protoreflect.Name(name)))
			}
			key, value := field("key").Bytes(), field("value").Bytes()
			set := with(p.msg("SetRequest"), map[string]any{"key": append([]byte("copy/"), key...), "value": value})
			if err := p.call(ctx, "Set", set, "SetResponse"); err != nil {
				return err
			}
			line := fmt.Sprintf("rev1 event op=%d key=%s value=%s unknown=%d", field("op").Enum(), key, value, len(ev.GetUnknown()))
			return p.call(ctx, "Log", with(p.msg("LogRequest"), map[string]any{"message": []byte(line)}), "Result")
		})},
	}}, p)
	return nil
}

func (p *rev1Rule) GRPCClient(context.Context, *goplugin.GRPCBroker, *grpc.ClientConn) (any, error) {
	return nil, errors.New("a plugin has no client side")
}

func (p *rev1Rule) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
	}
}

// TestRevision1Plugin: a plugin built against the proto before timers
// (and before the session, which it refuses as unknown, so that it gets
// Handle calls) starts on this host, calls the verbs it knows, and handles events; an
// event carrying the fields revision 2 added (which the host sends only to
// a rule that armed a timer, so never to such a plugin) still decodes, its
// new fields skipped as unknown.
func TestRevision1Plugin(t *testing.T) {
	fd := rev1Proto(t)
	h := abitest.New()
	s, _, logs := inProcessScriptOf(t, func() inProcessRule { return &rev1Rule{fd: fd} }, h, abi.Limits{})
	if _, ok := h.Watches()["w"]; !ok {
		t.Fatalf("init did not watch w: %v", h.Watches())
	}
	if _, ss := current(t, s); ss != nil {
		t.Fatal("a revision-1 plugin has a session")
	}
	if want := `"plugin built before sessions: one call per event and per host call;`; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs)
	}
	for _, tc := range []struct {
		ev   abi.Event
		want string
	}{
		{abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "v1"}, "rev1 event op=1 key=k value=v unknown=0"},
		{abi.Event{Key: "t", Op: abi.OpTimer, Value: []byte("p"), Deadline: 1732000000123, Late: true},
			"rev1 event op=4 key=t value=p unknown=9"}, // deadline_ms (1-byte tag, 6-byte varint), late (tag, 1)
	} {
		if err := s.Handle(context.Background(), tc.ev); err != nil {
			t.Fatalf("Handle(%+v): %v", tc.ev, err)
		}
		if got, _ := h.Value("copy/" + tc.ev.Key); string(got) != string(tc.ev.Value) {
			t.Errorf("copy/%s = %q, want %q", tc.ev.Key, got, tc.ev.Value)
		}
		if !slices.Contains(h.Logs(), abitest.LogLine{Level: abi.LevelInfo, Msg: tc.want}) {
			t.Errorf("log line %q missing: %v", tc.want, h.Logs())
		}
	}
}
