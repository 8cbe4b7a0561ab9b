package status

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/wire"
)

// Every error the store client can return maps to the status the ABI
// documents, and the message keeps the client's text (command and key).
func TestStoreErrorStatusTable(t *testing.T) {
	svc := func(text string) error {
		return fmt.Errorf("protocol: set %q: %w", "k", &protocol.ServiceError{Text: text})
	}
	wrap := func(err error) error { return fmt.Errorf("protocol: get %q: %w", "k", err) }
	cases := []struct {
		err  error
		want abi.Status
	}{
		{svc(wire.ErrTextTimestampSkew), abi.StatusStoreError},
		{svc(wire.ErrTextMissingFencingToken), abi.StatusFenced},
		{svc(wire.ErrTextFencingTokenSkew), abi.StatusStoreError},
		{svc(wire.ErrTextFencingTokenLower), abi.StatusFenced},
		{svc(wire.ErrTextQuotaExceeded), abi.StatusQuota},
		{svc(wire.ErrTextSyntax), abi.StatusInvalid},
		{svc(wire.ErrTextNotAuthorized), abi.StatusDenied},
		{svc(wire.ErrTextUnknownCommand), abi.StatusInternal},
		{svc(wire.ErrTextWrongNumberOfArgs), abi.StatusInvalid},
		{svc(wire.ErrTextTimestampMissing), abi.StatusInternal},
		{svc(wire.ErrTextTimestampMalformed), abi.StatusInternal},
		{svc(wire.ErrTextKeyLengthZero), abi.StatusInvalid},
		{svc("something new the service says"), abi.StatusStoreError},
		{wrap(protocol.ErrKeyLengthZero), abi.StatusInvalid}, // refused locally, before a round trip
		{wrap(protocol.ErrNotConnected), abi.StatusUnavailable},
		{wrap(protocol.ErrConnectionLost), abi.StatusUnavailable},
		{wrap(protocol.ErrClosed), abi.StatusUnavailable},
		{wrap(protocol.ErrTimeout), abi.StatusTimeout},
		{wrap(context.DeadlineExceeded), abi.StatusTimeout},
		{wrap(context.Canceled), abi.StatusTimeout},
		{wrap(protocol.ErrRejected), abi.StatusDenied},
		{wrap(&protocol.TooLargeError{Size: 5 << 20, Max: 4 << 20}), abi.StatusTooLarge}, // refused locally, unsent
		{wrap(&protocol.StatusError{Code: 505}), abi.StatusStoreError},
		{wrap(protocol.ErrUnexpectedReply), abi.StatusInternal},
		{errors.New("anything else"), abi.StatusInternal},
		{abi.Errorf(abi.StatusBusy, "already an abi error"), abi.StatusBusy},
	}
	for _, tc := range cases {
		got := StoreError(tc.err)
		if s := abi.StatusOf(got); s != tc.want {
			t.Errorf("%v: status %v, want %v", tc.err, s, tc.want)
		}
		if got.Error() != tc.err.Error() {
			t.Errorf("message changed: %q -> %q", tc.err, got)
		}
	}
	if StoreError(nil) != nil {
		t.Fatal("nil error mapped to an error")
	}
	// The table names every text of §8 (12 rows in the test above) and no
	// sentinel twice.
	seen := map[error]bool{}
	for _, row := range statusTable {
		if seen[row.err] {
			t.Errorf("%v listed twice", row.err)
		}
		seen[row.err] = true
	}
}

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
