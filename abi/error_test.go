package abi_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// An *abi.Error unwraps to its cause: errors.Is and errors.As see through
// it, and Errorf makes the argument of %w the cause, with the message
// formatted as fmt.Errorf formats it.
func TestErrorUnwrapsToItsCause(t *testing.T) {
	cause := fmt.Errorf("protocol: get %q: %w", "k", context.DeadlineExceeded)
	err := error(&abi.Error{Status: abi.StatusTimeout, Msg: cause.Error(), Err: cause})
	if !errors.Is(err, context.DeadlineExceeded) || abi.StatusOf(err) != abi.StatusTimeout || err.Error() != cause.Error() {
		t.Fatalf("%v: cause lost", err)
	}

	err = abi.Errorf(abi.StatusTimeout, "lock %q: gave up waiting: %w", "l", context.Canceled)
	var ae *abi.Error
	if !errors.As(err, &ae) || ae.Err != context.Canceled || !errors.Is(err, context.Canceled) {
		t.Fatalf("Errorf with %%w: %#v", err)
	}
	if want := `lock "l": gave up waiting: context canceled`; err.Error() != want {
		t.Fatalf("message %q, want %q", err, want)
	}

	err = abi.Errorf(abi.StatusNotFound, "get %q: %v", "k", context.Canceled)
	if !errors.As(err, &ae) || ae.Err != nil || errors.Is(err, context.Canceled) {
		t.Fatalf("Errorf with %%v made a cause: %#v", err)
	}

	// An *Error wrapped in another layer keeps its status.
	if s := abi.StatusOf(fmt.Errorf("handler: %w", abi.Errorf(abi.StatusDenied, "no"))); s != abi.StatusDenied {
		t.Fatalf("wrapped status %v", s)
	}
}

// Errorf formats every message as fmt.Errorf does and takes the same cause,
// whether or not an argument is an error: a %w of a non-error is a bad verb,
// %%w is text, a %v of an error is no cause, and of several %w none is the
// one cause (errors.Unwrap gives nil).
func TestErrorfIsFmtErrorf(t *testing.T) {
	cause, other := context.Canceled, errors.New("other")
	for _, tc := range []struct {
		format string
		args   []any
	}{
		{"no verbs", nil},
		{"del %q: not found", []any{"k"}},
		{"%s %q: value of %d bytes exceeds %d", []any{"set", "k\xff", 10, 5}},
		{"%w of a string", []any{"k"}},
		{"%+w and %[1]w", []any{"k"}},
		{"100%%w", nil},
		{"missing %s", nil},
		{"extra", []any{"k"}},
		{"lock %q: %v", []any{"l", cause}},
		{"lock %q: %w", []any{"l", cause}},
		{"lock %[2]q: %[1]w", []any{cause, "l"}},
		{"%w and %w", []any{cause, other}},
		{"%w", []any{(*abi.Error)(nil)}},
	} {
		want := fmt.Errorf(tc.format, tc.args...)
		err := abi.Errorf(abi.StatusInvalid, tc.format, tc.args...)
		var ae *abi.Error
		if !errors.As(err, &ae) || ae.Status != abi.StatusInvalid || ae.Msg != want.Error() || ae.Err != errors.Unwrap(want) {
			t.Errorf("Errorf(%q, %v) = %#v; want Msg %q, Err %v", tc.format, tc.args, err, want, errors.Unwrap(want))
		}
	}
}

// An Errorf without a cause allocates the *Error besides what formatting
// its message costs (fmt.Sprintf): not a wrapping error too, as
// fmt.Errorf makes. Averages over many calls, so that the printers the
// race detector's sync.Pool drops count alike in both (AllocsPerRun rounds
// them away or not).
func TestErrorfAllocations(t *testing.T) {
	key := errorfKey
	formatting := mallocsPer(func() { _ = fmt.Sprintf("%s %q: not found", abi.FnDel, key) })
	got := mallocsPer(func() { _ = abi.Errorf(abi.StatusNotFound, "%s %q: not found", abi.FnDel, key) })
	if got > formatting+1.5 {
		t.Fatalf("Errorf allocates %.2f times per call, formatting its message %.2f", got, formatting)
	}
}

// mallocsPer is the mean number of heap allocations of f over 10,000 calls,
// on one P as in testing.AllocsPerRun.
func mallocsPer(f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	const n = 10000
	f() // warm up
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range n {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / n
}

// errorfKey is a key that is not a constant, as a verb's key is not.
var errorfKey = "bench/absent"

// BenchmarkErrorf: the *Error of a routine failure (abitest's and the
// host binding's NOT_FOUND), and one with a cause (%w).
func BenchmarkErrorf(b *testing.B) {
	key := errorfKey
	b.Run("no cause", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = abi.Errorf(abi.StatusNotFound, "%s %q: not found", abi.FnDel, key)
		}
	})
	b.Run("cause", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = abi.Errorf(abi.StatusTimeout, "%s %q: %w", abi.FnDel, key, context.DeadlineExceeded)
		}
	})
}
