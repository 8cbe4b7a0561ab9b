package assemblyscript

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// msgCounter is abitest.Host whose del errors count the calls of their
// Error method: the wasm runtime builds a failure's last_error message
// (Error) when the guest first asks for it, so the count is the number of
// failures whose message the SDK fetched.
type msgCounter struct {
	*abitest.Host
	n atomic.Int64
}

func (h *msgCounter) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	if err := h.Host.Del(ctx, key, opts); err != nil {
		return &countedError{err, &h.n}
	}
	return nil
}

type countedError struct {
	err error
	n   *atomic.Int64
}

func (e *countedError) Error() string { e.n.Add(1); return e.err.Error() }
func (e *countedError) Unwrap() error { return e.err }

// handlerLog is the line a handler failing with INVALID after the call
// that failed with msg logs.
func handlerLog(msg string) abitest.LogLine {
	return abitest.LogLine{Level: abi.LevelError, Msg: "handler: INVALID: " + msg}
}

// TestLastErrorLazy: failures the rule branches on by their status fetch
// no message (the bench loop's 64 dels of an absent key), and the message
// of the last one is fetched, once, when asked for (here by the SDK itself:
// an event failing with a status logs lastError()).
func TestLastErrorLazy(t *testing.T) {
	h := &msgCounter{Host: abitest.New()}
	s := start(t, h, abi.Limits{})
	if err := s.Handle(context.Background(), benchEvent("del", 64)); err != nil {
		t.Fatal(err)
	}
	if n := h.n.Load(); n != 0 {
		t.Errorf("64 failed dels fetched %d messages, want 0 (none asked for)", n)
	}
	// An unknown bench verb fails the event with INVALID without a call.
	if err := s.Handle(context.Background(), benchEvent("nosuch", 1)); !errors.Is(err, abi.ErrCrashed) {
		t.Fatalf("Handle: %v, want the event failed", err)
	}
	if n := h.n.Load(); n != 1 {
		t.Errorf("%d messages fetched after the handler's failure, want 1", n)
	}
	if want := handlerLog(`del "absent": not found`); !slices.Contains(h.Logs(), want) {
		t.Errorf("logs %v, want %v", h.Logs(), want)
	}
}

// TestLastErrorNextEvent: lastError() still gives the most recent call's
// message in a later event, "" when that call succeeded, and the message
// of the most recent failure when several failed.
func TestLastErrorNextEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		verbs []string // bench loops, one call each, one event each
		want  string   // the message the next event's failure logs
	}{
		{"failure", []string{"del"}, `del "absent": not found`},
		{"two failures", []string{"vdel", "unwatch"}, `unwatch "bench/u": not watched`},
		{"failure then success", []string{"del", "watch"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			h.Put("bench/k", []byte("v"))
			s := start(t, h, abi.Limits{})
			for _, verb := range tc.verbs {
				if err := s.Handle(context.Background(), benchEvent(verb, 1)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Handle(context.Background(), benchEvent("nosuch", 1)); !errors.Is(err, abi.ErrCrashed) {
				t.Fatalf("Handle: %v, want the event failed", err)
			}
			want := handlerLog(tc.want)
			if tc.want == "" {
				want.Msg = "handler: INVALID"
			}
			if !slices.Contains(h.Logs(), want) {
				t.Errorf("logs %v, want %v", h.Logs(), want)
			}
		})
	}
}
