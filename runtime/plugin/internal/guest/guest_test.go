package guest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ssrun/ssrun/abi"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

func TestProtect(t *testing.T) {
	if err := protect("handle", nil, func() error { return nil }); err != nil {
		t.Errorf("nil: %v", err)
	}
	want := abi.Errorf(abi.StatusDenied, "no")
	if err := protect("handle", nil, func() error { return want }); err != want {
		t.Errorf("error not passed through: %v", err)
	}
	err := protect("init", io.Discard, func() error { panic("boom") })
	var e *abi.Error
	if !errors.As(err, &e) || e.Status != abi.StatusInternal || e.Msg != "init panicked: boom" {
		t.Errorf("panic: %v", err)
	}
}

func TestCallErr(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want abi.Status
	}{
		{status.Error(codes.DeadlineExceeded, "late"), abi.StatusTimeout},
		{status.Error(codes.Canceled, "gone"), abi.StatusTimeout},
		{status.Error(codes.Unavailable, "conn reset"), abi.StatusInternal},
		{errors.New("other"), abi.StatusInternal},
	} {
		err := callErr(abi.FnGet, "k", tc.err)
		var e *abi.Error
		if !errors.As(err, &e) || e.Status != tc.want || e.Msg != fmt.Sprintf(`get "k": host call failed: %v`, tc.err) {
			t.Errorf("%v: got %v (%v), want %s", tc.err, err, abi.StatusOf(err), tc.want)
		}
	}
}

func TestHandleBeforeInit(t *testing.T) {
	s := &ruleServer{rule: rule{handle: func(context.Context, abi.Host, abi.Event) error { return nil }}}
	res, err := s.Handle(context.Background(), &pb.HandleRequest{Event: &pb.Event{Key: []byte("k"), Op: pb.Op_OP_SET}})
	if err != nil || abi.Status(res.GetStatus()) != abi.StatusInvalid || string(res.GetMessage()) != "handle: event before init" {
		t.Errorf("got %v, %v", res, err)
	}
}
