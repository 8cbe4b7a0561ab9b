package wasm

import (
	"errors"
	"strings"
)

// lastError is what `last_error` returns: the message of the last call
// that failed. The failed call keeps its error; the message (its Error(),
// made valid UTF-8) is built when the guest first asks for it, then kept
// for the guest's further asks. Most failures are never printed (a Go SDK
// NOT_FOUND or NOT_APPLIED is branched on by its status and fetches no
// message), so they need not pay for Error, which may format, and the
// UTF-8 scan of its text.
//
// The message is built after the call returned, so it relies on what every
// error value should hold: its text does not change once returned.
type lastError struct {
	err  error  // the last failure, while its message is not built
	text string // the last failure's message, once built (err is nil)
}

// set makes err (non-nil) the last failure.
func (l *lastError) set(err error) { l.err, l.text = err, "" }

// message returns the last failure's message ("" before any failure),
// building it on the first call after set.
func (l *lastError) message() string {
	if l.err != nil {
		l.text, l.err = strings.ToValidUTF8(l.err.Error(), "\uFFFD"), nil
	}
	return l.text
}

// errNoRecord is the failure of `result` when no verb result is kept.
var errNoRecord = errors.New("result: no result record is kept (the last verb returned none)")
