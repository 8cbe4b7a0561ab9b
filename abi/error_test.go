package abi_test

import (
	"context"
	"errors"
	"fmt"
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
