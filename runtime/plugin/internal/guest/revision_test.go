package guest

import (
	"bytes"
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/ssrun/ssrun/abi"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// rev1Host is the Host service of a host built before revision 2: it has
// none of the methods revision 2 added (nor, here, the others).
type rev1Host struct {
	pb.UnimplementedHostServer
}

// failingNow is a host whose Now fails for a reason other than its age.
type failingNow struct {
	pb.UnimplementedHostServer
}

func (failingNow) Now(context.Context, *pb.NowRequest) (*pb.NowResponse, error) {
	return nil, status.Error(codes.Internal, "clock broken")
}

// dialHost serves srv as the Host service on an in-memory connection and
// returns the SDK's abi.Host on it, writing to stderr.
func dialHost(t *testing.T, srv pb.HostServer, stderr *bytes.Buffer) *remoteHost {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	g := grpc.NewServer()
	pb.RegisterHostServer(g, srv)
	done := make(chan error, 1)
	go func() { done <- g.Serve(lis) }()
	conn, err := grpc.NewClient("passthrough:///host",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = conn.Close()
		g.Stop()
		if err := <-done; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			t.Errorf("serve: %v", err)
		}
	})
	return &remoteHost{c: pb.NewHostClient(conn), stderr: stderr}
}

// TestRevision1Host: a plugin calling the revision-2 verbs on a host that
// lacks them gets STATUS_INTERNAL naming gRPC's "Unimplemented" (abi/doc.go,
// Versioning), and now falls back to the plugin's clock without a word.
func TestRevision1Host(t *testing.T) {
	var stderr bytes.Buffer
	h := dialHost(t, rev1Host{}, &stderr)
	ctx := context.Background()
	for verb, err := range map[string]error{
		abi.FnTimer:  h.Timer(ctx, "t", time.Second, abi.TimerOptions{Payload: []byte("p")}),
		abi.FnCancel: h.Cancel(ctx, "t"),
	} {
		var e *abi.Error
		if !errors.As(err, &e) || e.Status != abi.StatusInternal || !strings.HasPrefix(e.Msg, verb+` "t": host call failed: `) ||
			!strings.Contains(e.Msg, "Unimplemented") {
			t.Errorf("%s: %v (%s), want INTERNAL naming Unimplemented", verb, err, abi.StatusOf(err))
		}
	}
	before := time.Now().UnixMilli()
	now := h.Now()
	if after := time.Now().UnixMilli(); now < before || now > after {
		t.Errorf("now %d, want the plugin's clock, within [%d, %d]", now, before, after)
	}
	if stderr.Len() != 0 {
		t.Errorf("stderr: %q, want nothing for an older host", stderr.String())
	}
}

// TestNowHostFailure: when the host fails to answer now, the plugin's
// clock stands in and the failure is written to stderr.
func TestNowHostFailure(t *testing.T) {
	var stderr bytes.Buffer
	h := dialHost(t, failingNow{}, &stderr)
	before := time.Now().UnixMilli()
	now := h.Now()
	if after := time.Now().UnixMilli(); now < before || now > after {
		t.Errorf("now %d, want the plugin's clock, within [%d, %d]", now, before, after)
	}
	if got := stderr.String(); !strings.Contains(got, "now: host call failed, using the plugin's clock") || !strings.Contains(got, "clock broken") {
		t.Errorf("stderr: %q", got)
	}
}
