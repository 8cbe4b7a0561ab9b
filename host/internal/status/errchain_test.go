package status

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// The *abi.Error a rule gets keeps the store client's error as its cause:
// errors.Is finds every sentinel of the status table through it, and
// errors.As the service's own error, with the message unchanged.
func TestStoreErrorKeepsItsCause(t *testing.T) {
	for _, row := range statusTable {
		err := fmt.Errorf("protocol: get %q: %w", "k", row.err)
		got := StoreError(err)
		if !errors.Is(got, row.err) {
			t.Errorf("%v: errors.Is(storeError(err), %v) is false", err, row.err)
		}
		if abi.StatusOf(got) != row.status || got.Error() != err.Error() {
			t.Errorf("%v: status %v, message %q", err, abi.StatusOf(got), got)
		}
	}
	timeout := fmt.Errorf("protocol: set %q: %w after 5s: %w", "k", protocol.ErrTimeout, context.DeadlineExceeded)
	if got := StoreError(timeout); !errors.Is(got, protocol.ErrTimeout) || !errors.Is(got, context.DeadlineExceeded) {
		t.Errorf("a timed-out call's error %v lost protocol.ErrTimeout", got)
	}
	var se *protocol.ServiceError
	if got := StoreError(fmt.Errorf("protocol: set %q: %w", "k", &protocol.ServiceError{Text: "the quota has been exceeded"})); !errors.As(got, &se) || se.Text != "the quota has been exceeded" {
		t.Errorf("the service's error is not reachable through %v", got)
	}
}
