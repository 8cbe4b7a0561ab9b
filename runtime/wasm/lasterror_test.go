package wasm

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// countingError is a Host failure with status st that counts how often its
// text is asked for (Error), so a test sees whether the runtime formats a
// failure's message that nobody reads.
type countingError struct {
	msg   string
	st    *abi.Error // the status, found by abi.StatusOf through Unwrap
	texts atomic.Int32
}

func newCountingError(st abi.Status, msg string) *countingError {
	return &countingError{msg: msg, st: &abi.Error{Status: st}}
}

func (e *countingError) Error() string { e.texts.Add(1); return e.msg }
func (e *countingError) Unwrap() error { return e.st }

// TestLastErrorTextOnlyWhenAsked: a failed call keeps its error; its text
// (Error, made valid UTF-8) is built when the guest calls last_error, once
// however often it asks, and is exactly the error's text. A successful
// call leaves it; the next failure replaces it. A module built for
// revision 2 (no keys, watch_pattern, unwatch_pattern) or revision 1 (no
// timer, cancel, now either) gets the same.
func TestLastErrorTextOnlyWhenAsked(t *testing.T) {
	revision2 := slices.DeleteFunc(abi.HostFunctions(), func(fn string) bool {
		return fn == abi.FnKeys || fn == abi.FnWatchPattern || fn == abi.FnUnwatchPattern
	})
	revision1 := slices.DeleteFunc(slices.Clone(revision2), func(fn string) bool {
		return fn == abi.FnTimer || fn == abi.FnCancel || fn == abi.FnNow
	})
	for _, tc := range []struct {
		name    string
		imports []string
	}{
		{"revision 3", abi.HostFunctions()},
		{"revision 2", revision2},
		{"revision 1", revision1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			s := start(t, compile(t, sharedRuntime(t), "hand.wasm", handGuestOf(tc.imports, nil).bytes()), h, abi.Limits{})
			c := &handABI{t: t, s: s, h: h}
			c.write(atKey, []byte("k"))

			del := newCountingError(abi.StatusNotFound, "del \"k\": not \xfffound")
			const delText = "del \"k\": not \uFFFDfound"
			h.Fail(abi.FnDel, del)
			for range 3 {
				c.expect("del", c.call(abi.FnDel, atKey, 1, atFence, 0), abi.StatusNotFound)
			}
			c.expect("watch", c.call(abi.FnWatch, atKey, 1, 0), abi.StatusOK)
			if n := del.texts.Load(); n != 0 {
				t.Fatalf("the failure's Error was called %d times before last_error", n)
			}
			c.expect("last_error small", c.call(abi.FnLastError, atOut2, 3, atOutLen), abi.StatusBufferTooSmall)
			if c.outLen() != uint32(len(delText)) {
				t.Fatalf("last_error needs %d bytes, want %d", c.outLen(), len(delText))
			}
			for range 2 {
				if got := c.lastError(); got != delText {
					t.Fatalf("last_error %q, want %q", got, delText)
				}
			}
			if n := del.texts.Load(); n != 1 {
				t.Fatalf("the failure's Error was called %d times for three last_error calls, want 1", n)
			}

			unwatch := newCountingError(abi.StatusNotFound, `unwatch "k": not watched`)
			h.Fail(abi.FnUnwatch, unwatch)
			c.expect("unwatch", c.call(abi.FnUnwatch, atKey, 1), abi.StatusNotFound)
			if got := c.lastError(); got != unwatch.msg {
				t.Fatalf("last_error %q after the next failure, want %q", got, unwatch.msg)
			}
			c.expect("result", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusInvalid)
			if got, want := c.lastError(), "result: no result record is kept (the last verb returned none)"; got != want {
				t.Fatalf("last_error %q after a bad result, want %q", got, want)
			}
			if d, u := del.texts.Load(), unwatch.texts.Load(); d != 1 || u != 1 {
				t.Fatalf("Error called %d and %d times, want once each", d, u)
			}
		})
	}
}

// TestSDKFailuresFormatNoText: the Go SDK's routine failures (del
// NOT_FOUND, vdel NOT_APPLIED), branched on by status, never make the
// host format their message, through the SDK or as bare host calls.
func TestSDKFailuresFormatNoText(t *testing.T) {
	for _, tc := range []struct{ bench, fn string }{
		{"del", abi.FnDel},
		{"vdel", abi.FnVDel},
		{"raw-del", abi.FnDel},
	} {
		t.Run(tc.bench, func(t *testing.T) {
			h := abitest.New()
			h.Put("bench/k", []byte("0123456789abcdef"))
			st := abi.StatusNotFound
			if tc.fn == abi.FnVDel {
				st = abi.StatusNotApplied
			}
			e := newCountingError(st, tc.fn+" failed")
			h.Fail(tc.fn, e)
			s := ruleScript(t, h, abi.Limits{})
			if err := s.Handle(context.Background(), command("bench", tc.bench, "100")); err != nil {
				t.Fatal(err)
			}
			if n := h.Calls(tc.fn); n != 100 {
				t.Fatalf("host %s called %d times, want 100", tc.fn, n)
			}
			if n := e.texts.Load(); n != 0 {
				t.Fatalf("Error called %d times in 100 failures nobody printed", n)
			}
		})
	}
}
