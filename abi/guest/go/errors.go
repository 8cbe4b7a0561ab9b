package ssrun

import (
	"errors"
	"strconv"

	"github.com/ssrun/ssrun/abi"
)

// verbError is the error of a failed verb: its Status at once, the host's
// message only when asked for. Fetching the message costs a host call and
// a string allocation, and a heap allocation costs a Go guest about four
// host calls (runtime/wasm BenchmarkVerbs), while the routine outcomes
// (NOT_FOUND, NOT_APPLIED) are mostly branched on with StatusOf and never
// printed.
//
// The host keeps the message of the last failed call only, so the text is
// fetched when Error is first called and no other call failed since (seq
// is still the latest failure). Later, Error says the verb, key and status
// instead. Statuses whose message carries detail the SDK cannot rebuild
// (INVALID, DENIED, STORE_ERROR, ...) fetch it at once (see lazyText).
//
// errors.As(err, &e) with e an *Error works: it sets e to an *Error with
// the same Status and message (the same one each time).
//
// A routine failure that repeats the last one (same verb, key and status)
// returns the same error value again instead of a new one (see
// newFailure), so compare errors with StatusOf or errors.As, not with ==
// against an error kept from an earlier call.
type verbError struct {
	status    Status
	verb, key string
	seq       uint64     // the failure's number (failures when it failed); guarded by the guard
	msg       string     // the message once known; guarded by the guard
	err       *abi.Error // what As hands out, once asked; guarded by the guard
}

// lazyText reports whether a failure with status st leaves its message to
// be fetched when asked: the routine outcomes, whose message says no more
// than the verb, key and status do.
func lazyText(st Status) bool { return st == abi.StatusNotFound || st == abi.StatusNotApplied }

func (e *verbError) Error() string {
	enter()
	msg := e.text()
	leave()
	return msg
}

// text returns the message, fetching it from the host while that still
// holds it. Call with the guard held.
func (e *verbError) text() string {
	if e.msg == "" && e.seq == failures {
		e.msg = lastError()
	}
	if e.msg == "" {
		e.msg = e.verb + " " + strconv.Quote(e.key) + ": " + e.status.String()
	}
	return e.msg
}

// As sets a target of type **Error to the error as an *Error.
func (e *verbError) As(target any) bool {
	p, ok := target.(**abi.Error)
	if !ok {
		return false
	}
	enter()
	if e.err == nil {
		e.err = &abi.Error{Status: e.status, Msg: e.text()}
	}
	*p = e.err
	leave()
	return true
}

// failures counts the failed calls; the host's last_error holds the
// message of failure number failures. Guarded by the guard.
var failures uint64

// lastRoutine is the error of the last routine failure (lazyText), which
// newFailure hands out again when the next failure repeats it. Guarded by
// the guard.
var lastRoutine *verbError

// errChunk is how many verbErrors one allocation makes room for.
const errChunk = 32

// errSlab is the unused rest of the last chunk of verbErrors. Handing out
// one allocation's worth of errors errChunk times spares a loop of
// failures (e.g. Del of absent keys) an allocation per call; an error the
// rule keeps pins its chunk (about 2.5 KB). Guarded by the guard.
var errSlab []verbError

// newFailure counts a failure of verb on key with status st and returns
// its error, with the host's message already fetched unless lazyText.
// Call with the guard held, right after the failed host call.
//
// A routine failure that repeats the last routine one (same verb, key and
// status: a loop deleting an absent key, a compare that keeps failing)
// returns that error again: its message would be the same. If its text
// was not fetched yet, it now comes from this failure.
func newFailure(verb, key string, st Status) error {
	failures++
	if e := repeated(verb, key, st); e != nil {
		return e
	}
	return freshFailure(verb, key, st)
}

// repeated returns the last routine failure's error if a failure of verb
// on key with status st repeats it, with its lazy text now this failure's;
// else nil. Call with the guard held, after counting the failure.
func repeated(verb, key string, st Status) *verbError {
	e := lastRoutine
	if e == nil || e.status != st || e.key != key || e.verb != verb {
		return nil
	}
	if e.msg == "" {
		e.seq = failures
	}
	return e
}

// freshFailure is newFailure's error for a failure that repeats none.
// Call with the guard held, after counting the failure.
func freshFailure(verb, key string, st Status) error {
	if len(errSlab) == 0 {
		errSlab = make([]verbError, errChunk)
	}
	e := &errSlab[0]
	errSlab = errSlab[1:]
	*e = verbError{status: st, verb: verb, key: key, seq: failures}
	if !lazyText(st) {
		e.text()
		return e
	}
	lastRoutine = e
	return e
}

// statusOf is StatusOf without the errors.As walk for the SDK's own
// errors, small enough to be inlined in the rule.
func statusOf(err error) Status {
	if e, ok := err.(*verbError); ok {
		return e.status
	}
	return abi.StatusOf(err)
}

// asError reports whether err is or wraps an ABI error, and its status.
func asError(err error) (Status, bool) {
	if e, ok := err.(*verbError); ok {
		return e.status, true
	}
	var e *abi.Error
	if errors.As(err, &e) {
		return e.Status, true
	}
	return abi.StatusOK, false
}
