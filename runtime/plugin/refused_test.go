package plugin

import (
	"errors"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// A failure result becomes an *Error with the plugin's status and message;
// an error that is not an *abi.Error (wire.Err makes none, but nothing
// checks that at compile time) is INTERNAL with its text, not a panic.
func TestRefusedKeepsStatusAndNeverPanics(t *testing.T) {
	e := refused("r", callHandle, abi.Errorf(abi.StatusDenied, "no"), abi.ErrCrashed)
	if e.Status != abi.StatusDenied || e.Msg != "no" || !errors.Is(e, abi.ErrCrashed) {
		t.Fatalf("from an *abi.Error: %#v", e)
	}
	if want := "plugin r: handle: no (DENIED)"; e.Error() != want {
		t.Fatalf("message %q, want %q", e, want)
	}
	e = refused("r", callInit, errors.New("not an abi error"), abi.ErrTimeout)
	if e.Status != abi.StatusInternal || e.Msg != "not an abi error" || !errors.Is(e, abi.ErrTimeout) {
		t.Fatalf("from a plain error: %#v", e)
	}
}
