// Package ssrun is the guest SDK for ssrun rules written in plain Go and
// built as WebAssembly reactors with the standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o rule.wasm .
//
// A rule declares its watches and its handler in init; main stays empty
// (a c-shared module never runs it):
//
//	package main
//
//	import ssrun "github.com/ssrun/ssrun/abi/guest/go"
//
//	func init() {
//		ssrun.Watch("thermostat1/setPoint")
//		ssrun.Handle(func(ev ssrun.Event) error {
//			_, err := ssrun.Set("thermostat1/echo", ev.Value)
//			return err
//		})
//	}
//
//	func main() {}
//
// The verbs are those of package abi (see its documentation for the exact
// semantics). A failed call returns an error whose Status says what
// happened and whose message is the host's (e.g. `get "k": not found`); use
// StatusOf to branch on it, or errors.As with an *Error to get both. The
// routine outcomes NOT_FOUND and NOT_APPLIED cost almost nothing beyond
// the host call: their message is fetched when first asked for, and if
// another call failed before that (the host keeps the last message only)
// it is the verb, key and status instead (`get "k": NOT_FOUND`). Such a
// failure that repeats the last one (same verb, key and status) returns
// the same error value again: compare errors with StatusOf or errors.As,
// not with ==.
//
// Small results (at most 128 bytes: versions, tokens, short values) are
// carved from shared 1 KiB blocks, not allocated one by one: each result
// owns its bytes, but one that is kept keeps its block alive, so a rule
// keeping many long-lived results should bytes.Clone or strings.Clone
// them.
//
// Key families (ABI revision 3): Keys lists the keys matching a glob
// pattern (bounded: StatusLimit past the limit, never a cut list),
// WatchPattern delivers every key matching one, now or created later, and
// UnwatchPattern stops it. A rule that never calls them does not import
// them, so it loads on a host of revision 2 too.
//
// The SDK exports
// ssrun_abi_version, ssrun_alloc and ssrun_on_event and imports the host
// functions from module "ssrun".
//
// Calls are safe from any goroutine (one host call at a time). A handler's
// error or panic is logged through the host at error level, and the event
// fails: ssrun_on_event returns the Status of an *Error, or -1 for any other
// error or a panic.
//
// Built for any other platform the package compiles, so `go vet ./...` and
// unit tests of rule logic work, but every verb fails with
// StatusUnavailable.
package ssrun

import (
	"encoding/binary"
	"fmt"
	"runtime/debug"
	"time"
	"unsafe"

	"github.com/ssrun/ssrun/abi"
)

// Types shared with the host (see package abi).
type (
	// Event is one change delivered to the handler. Value stays valid
	// after the handler returns.
	Event = abi.Event
	// Value is the result of Get.
	Value = abi.Value
	// Error is a failed call: its Status and the host's message.
	Error = abi.Error
	// Status is the result code of a call.
	Status = abi.Status
	// Op is the kind of an event.
	Op = abi.Op
	// Condition is the write condition of Set.
	Condition = abi.Condition
	// SetOptions are the options of Set.
	SetOptions = abi.SetOptions
	// DelOptions are the options of Del and VDel.
	DelOptions = abi.DelOptions
	// WatchOptions are the options of Watch.
	WatchOptions = abi.WatchOptions
	// LockOptions are the options of Lock.
	LockOptions = abi.LockOptions
	// TimerOptions are the options of Timer.
	TimerOptions = abi.TimerOptions
)

// Event operations.
const (
	OpSet      = abi.OpSet
	OpDelete   = abi.OpDelete
	OpLockLost = abi.OpLockLost
	// OpTimer: the rule's timer named Key fired; Value is its payload,
	// Deadline when it was due (Unix ms), Late whether it fired after that.
	OpTimer = abi.OpTimer
)

// Set conditions.
const (
	CondNone = abi.CondNone
	CondNX   = abi.CondNX
	CondNEX  = abi.CondNEX
)

// Log levels (those of log/slog).
const (
	LevelDebug = abi.LevelDebug
	LevelInfo  = abi.LevelInfo
	LevelWarn  = abi.LevelWarn
	LevelError = abi.LevelError
)

// Statuses (see package abi).
const (
	StatusOK             = abi.StatusOK
	StatusNotFound       = abi.StatusNotFound
	StatusNotApplied     = abi.StatusNotApplied
	StatusBufferTooSmall = abi.StatusBufferTooSmall
	StatusInvalid        = abi.StatusInvalid
	StatusDenied         = abi.StatusDenied
	StatusFenced         = abi.StatusFenced
	StatusLockLost       = abi.StatusLockLost
	StatusBusy           = abi.StatusBusy
	StatusTimeout        = abi.StatusTimeout
	StatusUnavailable    = abi.StatusUnavailable
	StatusTooLarge       = abi.StatusTooLarge
	StatusQuota          = abi.StatusQuota
	StatusStoreError     = abi.StatusStoreError
	StatusInternal       = abi.StatusInternal
)

// StatusOf returns the Status of an error returned by this package (or
// wrapping one): OK for nil, the Status of a failed call or an *Error,
// StatusInternal for anything else.
func StatusOf(err error) Status { return statusOf(err) }

var handler func(Event) error

// Handle sets the function that receives every event. Call it from init.
func Handle(fn func(Event) error) { handler = fn }

// Get returns the value and version of key; StatusNotFound when absent. An
// empty value is returned as a non-nil empty slice.
func Get(key string) (Value, error) {
	data, version, err := get(key)
	return Value{Data: data, Version: version}, err
}

// Set writes key and returns the new version. When opts.Cond stops the
// write it returns the stored version and an error with StatusNotApplied.
// TTL is rounded up to whole milliseconds. At most one SetOptions.
func Set(key string, value []byte, opts ...SetOptions) (version string, err error) {
	return set(key, value, opts)
}

// Del removes key; StatusNotFound when it was absent.
func Del(key string, opts ...DelOptions) error { return del(key, opts) }

// VDel removes key if its value equals value; StatusNotFound when absent,
// StatusNotApplied when the value differs.
func VDel(key string, value []byte, opts ...DelOptions) error { return vdel(key, value, opts) }

// Watch delivers changes of key to the handler (not those made by this
// rule, unless opts.Self).
func Watch(key string, opts ...WatchOptions) error { return watch(key, opts) }

// Unwatch stops delivering changes of key; StatusNotFound when not watched.
func Unwatch(key string) error { return unwatch(key) }

// Lock acquires the lease name for ttl (renewed by the host while held) and
// returns its fencing token; StatusBusy when another holder keeps it past
// opts.Wait. Durations are rounded up to whole milliseconds.
func Lock(name string, ttl time.Duration, opts ...LockOptions) (token string, err error) {
	return lock(name, ttl, opts)
}

// Unlock releases the lease; StatusNotFound when this rule does not hold it.
func Unlock(name string) error { return unlock(name) }

// Log writes a log line tagged with the rule at level (LevelDebug...).
// Standard output and standard error reach the log too, at info and warn.
func Log(level int32, msg string) error { return logMsg(level, msg) }

// Timer arms the rule's timer name to fire after delay (zero: at once), and
// then every opts.Every if set, each time from the previous deadline (no
// drift). Arming a name that is armed replaces that timer, so re-arming on
// each change postpones it (the debounce idiom). When it fires the handler
// gets an Event with Op OpTimer, Key name, Value opts.Payload, its Deadline
// and Late. The timer is kept in the state store before Timer returns and
// survives restarts and reloads of the rule. StatusInvalid for an empty name
// or a negative duration, StatusQuota when the rule has too many timers,
// StatusTooLarge when the payload exceeds the rule's value limit.
// Durations are rounded up to whole milliseconds. At most one TimerOptions.
//
// A rule that never calls Timer, Cancel or Now does not import them, so it
// also loads on a host of ABI revision 1.
func Timer(name string, delay time.Duration, opts ...TimerOptions) error {
	return timer(name, delay, opts)
}

// Cancel disarms the rule's timer name; StatusNotFound when none is armed.
func Cancel(name string) error { return cancel(name) }

// Now returns the host's clock in Unix milliseconds: wall time from the
// hybrid logical clock the host keeps with the store, the clock of the
// Deadline of timer events (time.UnixMilli(ssrun.Now()) makes it a
// time.Time). Outside a WebAssembly rule it is the local clock.
func Now() int64 { return now() }

// The exported verbs are forwarders small enough to be inlined in the
// rule: a call of a function that calls costs a Go guest about half a
// host call. The verbs check their options themselves (one).

// one returns the single options value of a call, or the zero value.
func one[T any](verb, key string, opts []T) (T, error) {
	var zero T
	switch len(opts) {
	case 0:
		return zero, nil
	case 1:
		return opts[0], nil
	}
	return zero, abi.Errorf(abi.StatusInvalid, "%s %q: %d options values, want at most one", verb, key, len(opts))
}

// millis converts d to whole milliseconds, rounding up, so that a positive
// duration never becomes 0 ("none"); a negative one stays negative so the
// host rejects it.
func millis(d time.Duration) int64 {
	if d < 0 {
		return min(d.Milliseconds(), -1)
	}
	ms := int64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		ms++
	}
	return ms
}

// dispatch decodes an event record and runs the handler, turning its error
// or panic into a log line (through logf) and a failure code.
func dispatch(rec []byte, logf func(level int32, msg string)) (rc int32) {
	ev, err := abi.DecodeEvent(rec)
	if err != nil {
		logf(abi.LevelError, "ssrun: "+err.Error())
		return -1
	}
	if handler == nil {
		logf(abi.LevelError, "ssrun: no handler: call ssrun.Handle in init")
		return -1
	}
	defer func() {
		if p := recover(); p != nil {
			logf(abi.LevelError, fmt.Sprintf("handler panic: %v\n%s", p, debug.Stack()))
			rc = -1
		}
	}()
	if err := handler(ev); err != nil {
		logf(abi.LevelError, "handler: "+err.Error())
		return failureCode(err)
	}
	return 0
}

// failureCode is the ssrun_on_event result for a handler error: the Status
// of an *Error, else -1.
func failureCode(err error) int32 {
	if st, ok := asError(err); ok && st != abi.StatusOK {
		return int32(st)
	}
	return -1
}

// parseValue parses get's result record (field value, field version) into
// a Value that owns its memory and not rec: one carved block holds both
// (see carve), the Data capped at its length so that appending to it never
// reaches the Version. An empty value is a non-nil empty slice. Call with
// the guard held.
func parseValue(rec []byte) (Value, error) {
	data, rest, ok1 := field(rec)
	version, rest, ok2 := field(rest)
	if !ok1 || !ok2 || len(rest) != 0 {
		return Value{}, recordError(rec, 2)
	}
	n := len(data)
	buf := carve(n + len(version))
	copy(buf, data)
	copy(buf[n:], version)
	v := Value{Data: buf[:n:n]}
	if len(version) > 0 {
		v.Version = unsafe.String(&buf[n], len(version)) // never written again
	}
	return v, nil
}

// parseText parses a one-field result record (set's version, lock's
// token) into a carved string. Call with the guard held.
func parseText(rec []byte) (string, error) {
	f, rest, ok := field(rec)
	if !ok || len(rest) != 0 {
		return "", recordError(rec, 1)
	}
	return carveString(f), nil
}

// field is abi.ReadField for the SDK's hot path: small enough to inline,
// and without building an error (a call of abi.ReadField costs a Go guest
// about three host calls). On false, recordError says what was wrong.
func field(b []byte) (f, rest []byte, ok bool) {
	if len(b) < 4 {
		return nil, nil, false
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, false
	}
	return b[4 : 4+n : 4+n], b[4+n:], true
}

// recordError is the error of a result record of n fields that field
// could not read, from abi.ReadField.
func recordError(rec []byte, n int) error {
	for range n {
		var err error
		if _, rec, err = abi.ReadField(rec); err != nil {
			return err
		}
	}
	return fmt.Errorf("%w: %d trailing bytes after result", abi.ErrEncoding, len(rec))
}

// badRecord is the error for a result record the SDK cannot parse (a host
// bug, never expected).
func badRecord(verb, key string, err error) error {
	return abi.Errorf(abi.StatusInternal, "%s %q: malformed result record: %w", verb, key, err)
}
