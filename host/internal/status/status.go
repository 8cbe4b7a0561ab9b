// Package status turns the store client's errors into the abi statuses a rule
// sees, in one table, keeping the client's error as the cause.
package status

import (
	"context"
	"errors"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// statusTable maps store client errors to the status a rule sees. It is the
// one place where protocol errors become abi statuses (docs/architecture.md).
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
	{protocol.ErrConnectionLost, abi.StatusUnavailable},
	{protocol.ErrClosed, abi.StatusUnavailable},
	{protocol.ErrTimeout, abi.StatusTimeout},
	{protocol.ErrRejected, abi.StatusDenied},
	{protocol.ErrTooLarge, abi.StatusTooLarge},
	{protocol.ErrStatus, abi.StatusStoreError},
	{context.DeadlineExceeded, abi.StatusTimeout},
	{context.Canceled, abi.StatusTimeout},
}

// StoreError turns an error from the store client (which names the command
// and key) into the *abi.Error a rule sees. The client's error stays its
// cause, so errors.Is(err, protocol.ErrTimeout) holds for a host call that
// timed out.
func StoreError(err error) error {
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
	// The client's errors already name the command and the key.
	return &abi.Error{Status: status, Msg: err.Error(), Err: err}
}

// DeleteResult is the error of a del or vdel that removed n keys (nil when
// it removed the key).
func DeleteResult(verb, key string, n int64, err error) error {
	switch {
	case err != nil:
		return StoreError(err)
	case n == 1:
		return nil
	case n == 0:
		return abi.Errorf(abi.StatusNotFound, "%s %q: not found", verb, key)
	default:
		return abi.Errorf(abi.StatusNotApplied, "%s %q: value differs", verb, key)
	}
}

// KeysOverLimit is the LIMIT error of a keys call on pattern that matches
// more than limit keys.
func KeysOverLimit(pattern string, limit int) error {
	return abi.Errorf(abi.StatusLimit, "keys %q: more than %d keys match (pass a larger limit, up to %d, or a narrower pattern)", pattern, limit, abi.MaxKeysLimit)
}
