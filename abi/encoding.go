package abi

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Names of the WebAssembly binary contract (see doc.go for each signature).
const (
	// ImportModule is the name of the ABI's module in every runtime: the
	// WebAssembly import module of every host function, and what a Lua rule
	// passes to require.
	ImportModule = "ssrun"

	// Host functions (imports).
	FnGet       = "get"
	FnSet       = "set"
	FnDel       = "del"
	FnVDel      = "vdel"
	FnWatch     = "watch"
	FnUnwatch   = "unwatch"
	FnLock      = "lock"
	FnUnlock    = "unlock"
	FnLog       = "log"
	FnResult    = "result"
	FnLastError = "last_error"
	FnTimer     = "timer"  // revision 2
	FnCancel    = "cancel" // revision 2
	FnNow       = "now"    // revision 2

	FnKeys           = "keys"            // revision 3
	FnWatchPattern   = "watch_pattern"   // revision 3
	FnUnwatchPattern = "unwatch_pattern" // revision 3

	// Guest exports.
	ExportABIVersion = "ssrun_abi_version" // () -> i32: must return Version
	ExportAlloc      = "ssrun_alloc"       // (size i32) -> i32 ptr
	ExportOnEvent    = "ssrun_on_event"    // (ptr i32, len i32) -> i32 status
	// ExportCoalesced (optional, () -> i32 returning 1) says the guest
	// decodes the coalesced flag of an event record (see AppendEvent); a
	// guest without it never gets one, and sees no Event.Coalesced.
	ExportCoalesced = "ssrun_event_coalesced"
)

// HostFunctions returns every host function of ABI v1 (revision 3), in a
// new slice.
func HostFunctions() []string {
	return []string{FnGet, FnSet, FnDel, FnVDel, FnWatch, FnUnwatch, FnLock, FnUnlock, FnLog, FnResult, FnLastError,
		FnTimer, FnCancel, FnNow, FnKeys, FnWatchPattern, FnUnwatchPattern}
}

// Verbs returns the ABI verbs every runtime surface offers, in a new slice.
func Verbs() []string {
	return []string{FnGet, FnSet, FnDel, FnVDel, FnWatch, FnUnwatch, FnLock, FnUnlock, FnLog, FnTimer, FnCancel, FnNow,
		FnKeys, FnWatchPattern, FnUnwatchPattern}
}

// Op codes of the event record.
const (
	opCodeSet      = 1
	opCodeDelete   = 2
	opCodeLockLost = 3
	opCodeTimer    = 4 // revision 2

	flagResync    = 1
	flagLate      = 2 // revision 2: TIMER only
	flagCoalesced = 4 // SET and DELETE only, to a guest exporting ExportCoalesced
)

// ErrEncoding reports a malformed event or result record.
var ErrEncoding = errors.New("abi: malformed record")

// AppendField appends a length-prefixed field: u32 little-endian length, then
// the bytes.
func AppendField(dst, b []byte) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(b)))
	return append(dst, b...)
}

// ReadField reads one length-prefixed field from b and returns it (aliasing
// b) and the rest.
func ReadField(b []byte) (field, rest []byte, err error) {
	if len(b) < 4 {
		return nil, nil, fmt.Errorf("%w: field header needs 4 bytes, have %d", ErrEncoding, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if uint64(n) > uint64(len(b)-4) {
		return nil, nil, fmt.Errorf("%w: field of %d bytes, only %d left", ErrEncoding, n, len(b)-4)
	}
	return b[4 : 4+n : 4+n], b[4+n:], nil
}

// AppendEvent appends the binary event record handed to a WASM guest:
//
//	u8 op (1 SET, 2 DELETE, 3 LOCK_LOST, 4 TIMER)
//	u8 flags (bit 0 resync; bit 1 late, TIMER only; bit 2 coalesced) | u16 zero
//	field key | field value | field version      (fields as in AppendField)
//	TIMER only: u64 little-endian deadline (Unix milliseconds)
//	coalesced only: u32 little-endian Event.Coalesced (at most 2^32-1)
//
// A guest built before revision 2 never gets a TIMER record: only a rule
// that arms a timer (an import it does not have) receives one. The
// coalesced flag is set when Event.Coalesced > 0 (SET and DELETE only); the
// host clears Coalesced for a guest that does not export ExportCoalesced,
// so a guest built before it never sees the flag.
func AppendEvent(dst []byte, ev Event) []byte {
	var op byte
	switch ev.Op {
	case OpSet:
		op = opCodeSet
	case OpDelete:
		op = opCodeDelete
	case OpLockLost:
		op = opCodeLockLost
	case OpTimer:
		op = opCodeTimer
	}
	var flags byte
	if ev.Resync {
		flags |= flagResync
	}
	if ev.Late && ev.Op == OpTimer {
		flags |= flagLate
	}
	coalesced := coalescedOf(ev)
	if coalesced > 0 {
		flags |= flagCoalesced
	}
	dst = append(dst, op, flags, 0, 0)
	dst = AppendField(dst, []byte(ev.Key))
	dst = AppendField(dst, ev.Value)
	dst = AppendField(dst, []byte(ev.Version))
	if ev.Op == OpTimer {
		dst = binary.LittleEndian.AppendUint64(dst, uint64(ev.Deadline))
	}
	if coalesced > 0 {
		dst = binary.LittleEndian.AppendUint32(dst, coalesced)
	}
	return dst
}

// coalescedOf is ev.Coalesced as recorded: 0 unless a SET or DELETE,
// saturated at the u32's bound.
func coalescedOf(ev Event) uint32 {
	if ev.Coalesced <= 0 || (ev.Op != OpSet && ev.Op != OpDelete) {
		return 0
	}
	return uint32(min(uint64(ev.Coalesced), 1<<32-1))
}

// EventSize is the exact size of ev's record.
func EventSize(ev Event) int {
	n := 4 + 12 + len(ev.Key) + len(ev.Value) + len(ev.Version)
	if ev.Op == OpTimer {
		n += 8
	}
	if coalescedOf(ev) > 0 {
		n += 4
	}
	return n
}

// DecodeEvent parses an event record. Value aliases b; it is nil unless the
// op is SET.
func DecodeEvent(b []byte) (Event, error) {
	if len(b) < 4 {
		return Event{}, fmt.Errorf("%w: event header needs 4 bytes, have %d", ErrEncoding, len(b))
	}
	var ev Event
	switch b[0] {
	case opCodeSet:
		ev.Op = OpSet
	case opCodeDelete:
		ev.Op = OpDelete
	case opCodeLockLost:
		ev.Op = OpLockLost
	case opCodeTimer:
		ev.Op = OpTimer
	default:
		return Event{}, fmt.Errorf("%w: unknown op code %d", ErrEncoding, b[0])
	}
	allowed := byte(flagResync)
	switch ev.Op {
	case OpTimer:
		allowed |= flagLate
	case OpSet, OpDelete:
		allowed |= flagCoalesced
	}
	if b[1]&^allowed != 0 || b[2] != 0 || b[3] != 0 {
		return Event{}, fmt.Errorf("%w: reserved event header bits set", ErrEncoding)
	}
	ev.Resync = b[1]&flagResync != 0
	ev.Late = b[1]&flagLate != 0
	key, rest, err := ReadField(b[4:])
	if err != nil {
		return Event{}, fmt.Errorf("event key: %w", err)
	}
	value, rest, err := ReadField(rest)
	if err != nil {
		return Event{}, fmt.Errorf("event value: %w", err)
	}
	version, rest, err := ReadField(rest)
	if err != nil {
		return Event{}, fmt.Errorf("event version: %w", err)
	}
	if ev.Op == OpTimer {
		if len(rest) < 8 {
			return Event{}, fmt.Errorf("%w: TIMER event without its 8-byte deadline", ErrEncoding)
		}
		ev.Deadline = int64(binary.LittleEndian.Uint64(rest))
		rest = rest[8:]
	}
	if b[1]&flagCoalesced != 0 {
		if len(rest) < 4 {
			return Event{}, fmt.Errorf("%w: coalesced event without its 4-byte count", ErrEncoding)
		}
		ev.Coalesced = int(binary.LittleEndian.Uint32(rest))
		rest = rest[4:]
	}
	if len(rest) != 0 {
		return Event{}, fmt.Errorf("%w: %d trailing bytes after event", ErrEncoding, len(rest))
	}
	ev.Key, ev.Version = string(key), string(version)
	if ev.Op == OpSet || ev.Op == OpTimer {
		ev.Value = value
	} else if len(value) != 0 {
		return Event{}, fmt.Errorf("%w: %s event carries a value", ErrEncoding, ev.Op)
	}
	return ev, nil
}

// AppendKeys appends the result record of keys (revision 3) handed to a
// WASM guest: the number of keys as u32 little-endian, then each key as a
// field (AppendField), in order.
func AppendKeys(dst []byte, keys []string) []byte {
	dst = binary.LittleEndian.AppendUint32(dst, uint32(len(keys)))
	for _, k := range keys {
		dst = binary.LittleEndian.AppendUint32(dst, uint32(len(k)))
		dst = append(dst, k...)
	}
	return dst
}

// KeysSize is the exact size of the keys record of keys.
func KeysSize(keys []string) int {
	n := 4 + 4*len(keys)
	for _, k := range keys {
		n += len(k)
	}
	return n
}

// DecodeKeys parses a keys record (AppendKeys). The keys are copies. It
// refuses a count larger than the record could hold (each key takes 4
// bytes at least) before allocating, a field that runs past the end, and
// trailing bytes.
func DecodeKeys(b []byte) ([]string, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: keys record needs 4 bytes for its count, have %d", ErrEncoding, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	rest := b[4:]
	if uint64(n) > uint64(len(rest)/4) {
		return nil, fmt.Errorf("%w: keys record claims %d keys in %d bytes", ErrEncoding, n, len(rest))
	}
	keys := make([]string, n)
	for i := range keys {
		f, r, err := ReadField(rest)
		if err != nil {
			return nil, fmt.Errorf("key %d of %d: %w", i+1, n, err)
		}
		keys[i], rest = string(f), r
	}
	if len(rest) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes after %d keys", ErrEncoding, len(rest), n)
	}
	return keys, nil
}
