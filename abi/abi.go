package abi

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Version is the ABI version this package describes. A WASM module declares
// the version it was built for by exporting ExportABIVersion; a plugin sends
// it in its handshake.
const Version = 1

// Revision counts the additions to ABI Version 1, which never change what
// was there before (see doc.go, Versioning). Revision 2 added the verbs
// timer, cancel and now and the TIMER event. Revision 3 added keys,
// watch_pattern and unwatch_pattern, and StatusLimit.
const Revision = 3

// Status is the result code of every ABI call, the same in every runtime.
// Zero is success; the values are part of the binary contract and never
// change meaning.
type Status int32

// Status codes.
const (
	StatusOK             Status = 0  // success
	StatusNotFound       Status = 1  // get: key absent; del/vdel: nothing removed; unlock: lock not held
	StatusNotApplied     Status = 2  // set: NX/NEX condition failed; vdel: value differs
	StatusBufferTooSmall Status = 3  // WASM: result larger than the guest's buffer; fetch it with `result`
	StatusInvalid        Status = 4  // bad argument: empty key, unknown option, negative ttl, bad UTF-8 level...
	StatusDenied         Status = 5  // the rule's permissions do not allow this key
	StatusFenced         Status = 6  // the store refused the fencing token (missing or lower than the key's)
	StatusLockLost       Status = 7  // a write under a lock the rule no longer holds, refused locally
	StatusBusy           Status = 8  // lock: held by another holder when the wait ran out
	StatusTimeout        Status = 9  // the call's deadline passed
	StatusUnavailable    Status = 10 // the store is not connected
	StatusTooLarge       Status = 11 // the value exceeds the rule's value size limit, or the request the broker's maximum packet size
	StatusQuota          Status = 12 // the store's key quota is exhausted
	StatusStoreError     Status = 13 // any other error from the store (message says which)
	StatusInternal       Status = 14 // a host fault; the message says what
	StatusLimit          Status = 15 // a bound was reached: more keys match than keys' limit, or a pattern watch would pass the rule's max_watched_keys
)

var statusNames = [...]string{
	StatusOK:             "OK",
	StatusNotFound:       "NOT_FOUND",
	StatusNotApplied:     "NOT_APPLIED",
	StatusBufferTooSmall: "BUFFER_TOO_SMALL",
	StatusInvalid:        "INVALID",
	StatusDenied:         "DENIED",
	StatusFenced:         "FENCED",
	StatusLockLost:       "LOCK_LOST",
	StatusBusy:           "BUSY",
	StatusTimeout:        "TIMEOUT",
	StatusUnavailable:    "UNAVAILABLE",
	StatusTooLarge:       "TOO_LARGE",
	StatusQuota:          "QUOTA",
	StatusStoreError:     "STORE_ERROR",
	StatusInternal:       "INTERNAL",
	StatusLimit:          "LIMIT",
}

// Statuses lists every defined status in numeric order.
func Statuses() []Status {
	out := make([]Status, len(statusNames))
	for i := range out {
		out[i] = Status(i)
	}
	return out
}

// String returns the status name, e.g. "NOT_FOUND".
func (s Status) String() string {
	if s >= 0 && int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS_%d", int32(s))
}

// ParseStatus returns the status named name.
func ParseStatus(name string) (Status, bool) {
	for i, n := range statusNames {
		if n == name {
			return Status(i), true
		}
	}
	return 0, false
}

// Error is a failed ABI call: a status and a human message naming the verb
// and key, and the error that caused it, if any (e.g. the store client's
// error, so that errors.Is finds its sentinels through the *Error).
type Error struct {
	Status Status
	Msg    string
	Err    error // the cause, or nil; Msg already says what it is
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with status s and a message formatted as by
// fmt.Errorf: an argument of a %w verb becomes its cause (Err).
func Errorf(s Status, format string, args ...any) error {
	for _, a := range args {
		if _, ok := a.(error); ok {
			err := fmt.Errorf(format, args...)
			return &Error{Status: s, Msg: err.Error(), Err: errors.Unwrap(err)}
		}
	}
	// No argument is an error, so none can be a cause: fmt.Errorf would
	// format as Sprintf does (a %w of a non-error is a bad verb in both)
	// and wrap the text in an error of its own, only to be unwrapped to
	// nil. Failures are routine (NOT_FOUND, NOT_APPLIED): this spares
	// each one allocation of four and about a tenth of Errorf's time.
	//
	// (vet's printf check takes Errorf for a wrapper of fmt.Errorf, as it
	// is, only while this call does not pass on format itself.)
	f := format
	return &Error{Status: s, Msg: fmt.Sprintf(f, args...)}
}

// StatusOf maps an error from a Host call to the status a guest sees: nil is
// StatusOK, an *Error its own status, a context deadline StatusTimeout, any
// other error StatusInternal.
func StatusOf(err error) Status {
	if err == nil {
		return StatusOK
	}
	if e, ok := err.(*Error); ok { // the common case, without errors.As
		return e.Status
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Status
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return StatusTimeout
	}
	return StatusInternal
}

// Op is the kind of an event.
type Op string

// Event operations.
const (
	OpSet      Op = "SET"       // the key was written; Value is the new value
	OpDelete   Op = "DELETE"    // the key was deleted or expired
	OpLockLost Op = "LOCK_LOST" // the rule lost the lock named Key; fenced writes under it now fail
	// OpTimer: the rule's timer named Key fired; Value is its payload,
	// Deadline when it was due, Late whether it fired after that.
	OpTimer Op = "TIMER"
)

// Event is one change delivered to a rule.
type Event struct {
	Key     string // the watched key (or the lock name for OpLockLost)
	Op      Op
	Value   []byte // new value for OpSet, nil otherwise
	Version string // the store version (HLC text) of the change; empty when unknown
	// Resync marks an event synthesised after a reconnect: the key changed
	// (or vanished) while the host was offline, and intermediate changes
	// may have been missed.
	Resync bool
	// Deadline is when an OpTimer event was due, in Unix milliseconds of
	// the host's clock (Host.Now); zero for other events.
	Deadline int64
	// Late marks an OpTimer event delivered after its deadline (the host
	// was down, or the rule busy past it).
	Late bool
	// Coalesced is how many earlier changes of the key this OpSet or
	// OpDelete event replaced while they waited in the rule's full mailbox
	// (the event stands for Coalesced+1 changes; 0: none). The rule still
	// sees the key's latest value and version.
	Coalesced int
}

// Condition is the write condition of a set.
type Condition uint8

// Set conditions.
const (
	CondNone Condition = 0 // always write
	CondNX   Condition = 1 // write only if the key is absent
	CondNEX  Condition = 2 // write if absent or if the stored value equals the new one
)

// SetOptions are the options of set.
type SetOptions struct {
	Cond Condition
	// TTL expires the key after this long (store PX, millisecond
	// resolution); zero means no expiry.
	TTL time.Duration
	// Fence names a lock held by this rule; its current token is attached
	// to the write as the fencing token, and the write fails locally with
	// StatusLockLost once the lock is lost.
	Fence string
}

// DelOptions are the options of del and vdel.
type DelOptions struct {
	Fence string // as in SetOptions
}

// WatchOptions are the options of watch.
type WatchOptions struct {
	// Self also delivers changes made by this rule's own writes (by default
	// a rule is not woken by its own write).
	Self bool
}

// KeysOptions are the options of keys.
type KeysOptions struct {
	// Limit is the most keys Keys returns; 0 means DefaultKeysLimit, and no
	// more than MaxKeysLimit. When more keys match, Keys fails with
	// StatusLimit (never a silently cut list).
	Limit int
}

// Bounds of keys.
const (
	DefaultKeysLimit = 1000
	MaxKeysLimit     = 100_000
)

// LockOptions are the options of lock.
type LockOptions struct {
	// Wait is how long to wait for a lock held by another holder to be
	// released before failing with StatusBusy; zero tries once.
	Wait time.Duration
}

// TimerOptions are the options of timer.
type TimerOptions struct {
	// Every, when positive, re-arms the timer after each firing to the
	// previous deadline plus Every (from the deadline, not the firing: no
	// drift); zero fires once.
	Every time.Duration
	// Payload is the Value of the timer's events.
	Payload []byte
}

// Value is the result of get.
type Value struct {
	Data    []byte
	Version string
}

// Log levels, the values of log/slog.
const (
	LevelDebug int32 = -4
	LevelInfo  int32 = 0
	LevelWarn  int32 = 4
	LevelError int32 = 8
)

// Host is what a runtime calls on behalf of one rule. The host binds an
// implementation to each rule (permissions, limits, locks and echo
// suppression are per rule). Every method is safe for concurrent use; errors
// are *Error values (see StatusOf).
//
// The value Set and VDel are given, and Timer's payload, are lent for the
// call, as io.Writer's p: a runtime may pass a view of its sandbox's memory
// (the WASM runtime does, saving a copy per write), so a Host must not
// modify them, nor keep or read them after the method returns; it copies
// what it keeps. Keys and other strings are the Host's.
type Host interface {
	// Get returns the value and version of key; StatusNotFound when absent.
	Get(ctx context.Context, key string) (Value, error)
	// Set writes key. It returns the new version; when a condition stops
	// the write it returns the stored version and StatusNotApplied.
	Set(ctx context.Context, key string, value []byte, opts SetOptions) (version string, err error)
	// Del removes key; StatusNotFound when it was absent.
	Del(ctx context.Context, key string, opts DelOptions) error
	// VDel removes key if its value equals value; StatusNotFound when
	// absent, StatusNotApplied when the value differs.
	VDel(ctx context.Context, key string, value []byte, opts DelOptions) error
	// Watch delivers changes of key to this rule. Idempotent.
	Watch(ctx context.Context, key string, opts WatchOptions) error
	// Unwatch stops delivering changes of key; StatusNotFound when not watched.
	Unwatch(ctx context.Context, key string) error
	// Keys returns the keys matching pattern (the glob of the ACL's
	// keyType Pattern: * ? [set] and \ escapes), sorted bytewise, that the
	// rule may read; keys under the host's reserved prefix ($ssrun/) never.
	// StatusInvalid for a malformed pattern, StatusDenied for a pattern no
	// key the rule may read can match, StatusLimit past opts.Limit.
	Keys(ctx context.Context, pattern string, opts KeysOptions) ([]string, error)
	// WatchPattern delivers changes of every key matching pattern: the keys
	// that exist when it is called (an OpSet event each, as a resync does)
	// and those created later, and an OpDelete when one goes away.
	// Idempotent. StatusLimit when the rule would watch more than its
	// max_watched_keys keys.
	WatchPattern(ctx context.Context, pattern string, opts WatchOptions) error
	// UnwatchPattern stops it; StatusNotFound when the pattern is not watched.
	UnwatchPattern(ctx context.Context, pattern string) error
	// Lock acquires the lease name for ttl, renewed by the host while held,
	// and returns its fencing token. StatusBusy when another holder keeps
	// it past opts.Wait. Locking a lock the rule already holds returns its
	// current token.
	Lock(ctx context.Context, name string, ttl time.Duration, opts LockOptions) (token string, err error)
	// Unlock releases the lease; StatusNotFound when the rule does not hold it.
	Unlock(ctx context.Context, name string) error
	// Log writes a log line tagged with the rule.
	Log(level int32, msg string)
	// Timer arms the rule's timer name to fire after delay (zero: at once),
	// then every opts.Every if set, replacing an armed timer of that name
	// (re-arming is the debounce idiom). The timer is durable: it is kept in
	// the state store before Timer returns, and survives host restarts and
	// rule reloads. Its firing is an OpTimer event.
	Timer(ctx context.Context, name string, delay time.Duration, opts TimerOptions) error
	// Cancel disarms the rule's timer name; StatusNotFound when none is armed.
	Cancel(ctx context.Context, name string) error
	// Now returns the host's clock: wall time in Unix milliseconds, from the
	// hybrid logical clock the host keeps with the store (never behind a
	// version the host has seen).
	Now() int64
}
