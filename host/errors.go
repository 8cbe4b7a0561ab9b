package host

import (
	"context"
	"errors"
	"fmt"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// statusTable maps store client errors to the status a rule sees. It is the
// one place where protocol errors become abi statuses (architecture.md §6).
var statusTable = []struct {
	err    error
	status abi.Status
}{
	{protocol.ErrKeyLengthZero, abi.StatusInvalid},
	{protocol.ErrSyntax, abi.StatusInvalid},
	{protocol.ErrWrongNumberOfArguments, abi.StatusInvalid},
	{protocol.ErrUnknownCommand, abi.StatusInternal},
	{protocol.ErrMissingFencingToken, abi.StatusFenced},
	{protocol.ErrFencingTokenLowerVersion, abi.StatusFenced},
	{protocol.ErrQuotaExceeded, abi.StatusQuota},
	{protocol.ErrNotAuthorized, abi.StatusDenied},
	{protocol.ErrTimestampSkew, abi.StatusStoreError},
	{protocol.ErrFencingTokenSkew, abi.StatusStoreError},
	{protocol.ErrTimestampMissing, abi.StatusInternal},
	{protocol.ErrTimestampMalformed, abi.StatusInternal},
	{protocol.ErrNotConnected, abi.StatusUnavailable},
	{protocol.ErrClosed, abi.StatusUnavailable},
	{context.DeadlineExceeded, abi.StatusTimeout},
	{context.Canceled, abi.StatusTimeout},
}

// storeError turns an error from the store client into the *abi.Error a rule
// sees, naming the verb and key.
func storeError(verb, key string, err error) error {
	if err == nil {
		return nil
	}
	var ae *abi.Error
	if errors.As(err, &ae) {
		return err
	}
	status := abi.StatusStoreError
	var se *protocol.ServiceError
	if !errors.As(err, &se) {
		status = abi.StatusInternal
	}
	for _, row := range statusTable {
		if errors.Is(err, row.err) {
			status = row.status
			break
		}
	}
	return &abi.Error{Status: status, Msg: fmt.Sprintf("%s %q: %v", verb, key, err)}
}
