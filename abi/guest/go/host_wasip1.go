//go:build wasip1

package ssrun

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
	"unsafe"

	"github.com/ssrun/ssrun/abi"
)

// Host functions of ABI v1 (abi/doc.go, "WebAssembly binary contract").
// Pointers are lowered to i32 offsets into linear memory. The host reads
// and writes them during the call only (it copies what it keeps), hence
// go:noescape: a key or value built on the caller's stack stays there
// instead of costing the guest a heap allocation.

//go:noescape
//go:wasmimport ssrun get
func hostGet(keyPtr unsafe.Pointer, keyLen uint32, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:noescape
//go:wasmimport ssrun set
func hostSet(keyPtr unsafe.Pointer, keyLen uint32, valPtr unsafe.Pointer, valLen uint32, cond int32, ttlMs int64,
	fencePtr unsafe.Pointer, fenceLen uint32, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:noescape
//go:wasmimport ssrun del
func hostDel(keyPtr unsafe.Pointer, keyLen uint32, fencePtr unsafe.Pointer, fenceLen uint32) int32

//go:noescape
//go:wasmimport ssrun vdel
func hostVDel(keyPtr unsafe.Pointer, keyLen uint32, valPtr unsafe.Pointer, valLen uint32, fencePtr unsafe.Pointer, fenceLen uint32) int32

//go:noescape
//go:wasmimport ssrun watch
func hostWatch(keyPtr unsafe.Pointer, keyLen uint32, flags int32) int32

//go:noescape
//go:wasmimport ssrun unwatch
func hostUnwatch(keyPtr unsafe.Pointer, keyLen uint32) int32

//go:noescape
//go:wasmimport ssrun lock
func hostLock(namePtr unsafe.Pointer, nameLen uint32, ttlMs int64, waitMs int64, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:noescape
//go:wasmimport ssrun unlock
func hostUnlock(namePtr unsafe.Pointer, nameLen uint32) int32

//go:noescape
//go:wasmimport ssrun log
func hostLog(level int32, msgPtr unsafe.Pointer, msgLen uint32) int32

//go:noescape
//go:wasmimport ssrun result
func hostResult(outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:noescape
//go:wasmimport ssrun last_error
func hostLastError(outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

// Revision 2. The linker keeps an import only if the rule calls it, so a
// rule without timers still loads on a revision-1 host.

//go:noescape
//go:wasmimport ssrun timer
func hostTimer(namePtr unsafe.Pointer, nameLen uint32, delayMs int64, everyMs int64, payloadPtr unsafe.Pointer, payloadLen uint32) int32

//go:noescape
//go:wasmimport ssrun cancel
func hostCancel(namePtr unsafe.Pointer, nameLen uint32) int32

//go:noescape
//go:wasmimport ssrun now
func hostNow(outPtr unsafe.Pointer) int32

// outCap is the size of the shared buffer of last_error's message and
// now's clock; a longer message takes the BUFFER_TOO_SMALL path and a
// buffer of its own. (Verb results go to the result blocks.)
const outCap = 16 << 10

// out is the shared buffer, outLen the length the host writes for every
// call with an out buffer; guarded by the guard.
var (
	out    [outCap]byte
	outLen uint32
)

func strPtr(s string) unsafe.Pointer   { return unsafe.Pointer(unsafe.StringData(s)) }
func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
func outPtr() unsafe.Pointer           { return unsafe.Pointer(&out[0]) }
func lenPtr() unsafe.Pointer           { return unsafe.Pointer(&outLen) }

// The verbs below keep their success path in one function: on wasm a call
// of a function that itself calls costs a Go guest 0.1 of a host call
// (runtime/wasm BenchmarkGuestSteps; 0.8 while wazero's termination check
// left the guest at every loop header, and Go opens such a function with
// a loop), so the guard and the parse of the result are inlined, and only
// the rare paths (a failure, a result longer than the rest of the block, a
// new result block) are calls of their own.

// record returns the result record in the shared buffer. Call with the
// guard held, after a verb that returned a record.
func record() []byte { return out[:min(int(outLen), outCap)] }

// fetch returns the result record of a verb that returned
// BUFFER_TOO_SMALL, fetched with `result` into a buffer of its own, and
// the verb's real status. Call with the guard held.
func fetch() ([]byte, Status) {
	if yieldInVerb != nil {
		yieldInVerb()
	}
	for {
		big := make([]byte, outLen)
		st := Status(hostResult(bytesPtr(big), uint32(len(big)), lenPtr()))
		if st != abi.StatusBufferTooSmall {
			return big[:min(int(outLen), len(big))], st
		}
	}
}

// yieldInVerb, when set, is called by fetch with the guard held: the test
// rule of runtime/wasm sets it (through go:linkname) to runtime.Gosched,
// so that other goroutines try verbs while one is inside a verb, between
// its host call and its `result` (TestVerbsConcurrently).
var yieldInVerb func()

// failed returns the error of verb on key that returned st (newFailure)
// and releases the guard.
//
//go:noinline
func failed(verb, key string, st Status) error {
	err := newFailure(verb, key, st)
	leave()
	return err
}

// again is failed's common case, inlined in the verbs without result so
// that a routine failure costs no call: if the failure of verb on key
// with status st repeats the last one with the same key and verb strings
// (a loop's usual case; repeated compares their text), it counts the
// failure, releases the guard and returns the last error; else nil.
func again(verb, key string, st int32) *verbError {
	e := lastRoutine
	if e == nil || int32(e.status) != st || !same(e.key, key) || !same(e.verb, verb) {
		return nil
	}
	failures++
	if e.msg == "" {
		e.seq = failures
	}
	leave()
	return e
}

// same reports whether a and b are the same string in memory.
func same(a, b string) bool {
	return unsafe.StringData(a) == unsafe.StringData(b) && len(a) == len(b)
}

// lastError returns the host's message of the last failed call, or "" if
// it cannot be read. Call with the guard held.
func lastError() string {
	switch Status(hostLastError(outPtr(), outCap, lenPtr())) {
	case abi.StatusOK:
		return string(record())
	case abi.StatusBufferTooSmall:
		big := make([]byte, outLen)
		if Status(hostLastError(bytesPtr(big), uint32(len(big)), lenPtr())) == abi.StatusOK {
			return string(big[:min(int(outLen), len(big))])
		}
	}
	return ""
}

// The verbs with a result (get, set, lock) have the host write it straight
// into the current result block (see results.go), at least maxCarve bytes
// long, and keep it there: the result is the record itself, its length
// prefixes never read again. A record longer than the rest of the block
// takes the BUFFER_TOO_SMALL path: fetched with `result` into a buffer of
// its own.

// get returns the value's data and version, not a Value: on wasm the Go
// compiler zeroes and copies a result of more than 32 bytes with bulk
// memory instructions, each a call out of the guest in wazero (a Value is
// 40), while Get, inlined in the rule, assembles the Value in registers.
func get(key string) ([]byte, string, error) {
	enter()
	if len(block) < maxCarve {
		newBlock()
	}
	st := Status(hostGet(strPtr(key), uint32(len(key)), bytesPtr(block), uint32(len(block)), lenPtr()))
	if st != abi.StatusOK {
		return getSlow(key, st)
	}
	// parseValue by hand, in place.
	rec := block[:min(int(outLen), len(block))]
	data, rest, ok1 := field(rec)
	version, rest, ok2 := field(rest)
	if !ok1 || !ok2 || len(rest) != 0 {
		return getSlow(key, st)
	}
	block = block[len(rec):]
	leave()
	if len(version) == 0 {
		return data, "", nil
	}
	return data, unsafe.String(&version[0], len(version)), nil // never written again
}

// getSlow is get after a status other than OK (a failure, or a value
// larger than the rest of the block) or a record get could not parse. It
// releases the guard.
//
//go:noinline
func getSlow(key string, st Status) ([]byte, string, error) {
	var rec []byte
	switch st {
	case abi.StatusOK: // malformed: parseValue says how
		rec = bytes.Clone(block[:min(int(outLen), len(block))])
	case abi.StatusBufferTooSmall:
		rec, st = fetch()
	}
	if st != abi.StatusOK {
		return nil, "", failed(abi.FnGet, key, st)
	}
	v, err := parseValue(rec)
	leave()
	if err != nil {
		return nil, "", badRecord(abi.FnGet, key, err)
	}
	return v.Data, v.Version, nil
}

func set(key string, value []byte, opts []SetOptions) (string, error) {
	var o SetOptions
	if len(opts) != 0 {
		var err error
		if o, err = one(abi.FnSet, key, opts); err != nil {
			return "", err
		}
	}
	enter()
	if len(block) < maxCarve {
		newBlock()
	}
	st := Status(hostSet(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), int32(o.Cond), millis(o.TTL),
		strPtr(o.Fence), uint32(len(o.Fence)), bytesPtr(block), uint32(len(block)), lenPtr()))
	if st != abi.StatusOK {
		return textSlow(abi.FnSet, key, st, true)
	}
	// parseText by hand, in place (see get).
	rec := block[:min(int(outLen), len(block))]
	f, rest, ok := field(rec)
	if !ok || len(rest) != 0 || len(f) == 0 {
		return textSlow(abi.FnSet, key, st, true)
	}
	block = block[len(rec):]
	leave()
	return unsafe.String(&f[0], len(f)), nil // never written again
}

// textSlow is set and lock after a status other than OK (a failure, set's
// NOT_APPLIED with the stored version when notAppliedRec; a result longer
// than the rest of the block) or a record they could not take as it is
// (empty, or malformed). It releases the guard.
//
//go:noinline
func textSlow(verb, key string, st Status, notAppliedRec bool) (string, error) {
	var text string
	var err error
	switch {
	case st == abi.StatusBufferTooSmall:
		var rec []byte
		if rec, st = fetch(); st != abi.StatusOK && !(notAppliedRec && st == abi.StatusNotApplied) {
			return "", failed(verb, key, st)
		}
		text, err = parseText(rec)
	case st == abi.StatusOK || notAppliedRec && st == abi.StatusNotApplied:
		text, err = takeText()
	default:
		return "", failed(verb, key, st)
	}
	if err != nil {
		leave()
		return "", badRecord(verb, key, err)
	}
	if st != abi.StatusOK {
		return text, failed(verb, key, st)
	}
	leave()
	return text, nil
}

// takeText returns the text of the one-field record the host wrote at the
// start of block, in place, and moves block past it. Call with the guard
// held.
func takeText() (string, error) {
	rec := block[:min(int(outLen), len(block))]
	f, rest, ok := field(rec)
	if !ok || len(rest) != 0 {
		return "", recordError(rec, 1)
	}
	block = block[len(rec):]
	if len(f) == 0 {
		return "", nil
	}
	return unsafe.String(&f[0], len(f)), nil // never written again
}

func del(key string, opts []DelOptions) error {
	var o DelOptions
	if len(opts) != 0 {
		var err error
		if o, err = one(abi.FnDel, key, opts); err != nil {
			return err
		}
	}
	enter()
	if st := hostDel(strPtr(key), uint32(len(key)), strPtr(o.Fence), uint32(len(o.Fence))); st != 0 {
		if e := again(abi.FnDel, key, st); e != nil {
			return e
		}
		return failed(abi.FnDel, key, Status(st))
	}
	leave()
	return nil
}

func vdel(key string, value []byte, opts []DelOptions) error {
	var o DelOptions
	if len(opts) != 0 {
		var err error
		if o, err = one(abi.FnVDel, key, opts); err != nil {
			return err
		}
	}
	enter()
	if st := hostVDel(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), strPtr(o.Fence), uint32(len(o.Fence))); st != 0 {
		if e := again(abi.FnVDel, key, st); e != nil {
			return e
		}
		return failed(abi.FnVDel, key, Status(st))
	}
	leave()
	return nil
}

func watch(key string, opts []WatchOptions) error {
	var flags int32
	if len(opts) != 0 {
		o, err := one(abi.FnWatch, key, opts)
		if err != nil {
			return err
		}
		if o.Self {
			flags |= 1
		}
	}
	enter()
	if st := hostWatch(strPtr(key), uint32(len(key)), flags); st != 0 {
		return failed(abi.FnWatch, key, Status(st))
	}
	leave()
	return nil
}

func unwatch(key string) error {
	enter()
	if st := hostUnwatch(strPtr(key), uint32(len(key))); st != 0 {
		if e := again(abi.FnUnwatch, key, st); e != nil {
			return e
		}
		return failed(abi.FnUnwatch, key, Status(st))
	}
	leave()
	return nil
}

func lock(name string, ttl time.Duration, opts []LockOptions) (string, error) {
	var o LockOptions
	if len(opts) != 0 {
		var err error
		if o, err = one(abi.FnLock, name, opts); err != nil {
			return "", err
		}
	}
	enter()
	if len(block) < maxCarve {
		newBlock()
	}
	st := Status(hostLock(strPtr(name), uint32(len(name)), millis(ttl), millis(o.Wait), bytesPtr(block), uint32(len(block)), lenPtr()))
	if st != abi.StatusOK {
		return textSlow(abi.FnLock, name, st, false)
	}
	// parseText by hand, in place (see get).
	rec := block[:min(int(outLen), len(block))]
	f, rest, ok := field(rec)
	if !ok || len(rest) != 0 || len(f) == 0 {
		return textSlow(abi.FnLock, name, st, false)
	}
	block = block[len(rec):]
	leave()
	return unsafe.String(&f[0], len(f)), nil // never written again
}

func unlock(name string) error {
	enter()
	if st := hostUnlock(strPtr(name), uint32(len(name))); st != 0 {
		if e := again(abi.FnUnlock, name, st); e != nil {
			return e
		}
		return failed(abi.FnUnlock, name, Status(st))
	}
	leave()
	return nil
}

func logMsg(level int32, msg string) error {
	enter()
	if st := hostLog(level, strPtr(msg), uint32(len(msg))); st != 0 {
		return failed(abi.FnLog, "", Status(st))
	}
	leave()
	return nil
}

func logLine(level int32, msg string) { _ = logMsg(level, msg) }

func timer(name string, delay time.Duration, opts []TimerOptions) error {
	var o TimerOptions
	if len(opts) != 0 {
		var err error
		if o, err = one(abi.FnTimer, name, opts); err != nil {
			return err
		}
	}
	enter()
	if st := hostTimer(strPtr(name), uint32(len(name)), millis(delay), millis(o.Every), bytesPtr(o.Payload), uint32(len(o.Payload))); st != 0 {
		return failed(abi.FnTimer, name, Status(st))
	}
	leave()
	return nil
}

func cancel(name string) error {
	enter()
	if st := hostCancel(strPtr(name), uint32(len(name))); st != 0 {
		if e := again(abi.FnCancel, name, st); e != nil {
			return e
		}
		return failed(abi.FnCancel, name, Status(st))
	}
	leave()
	return nil
}

// now reads the host's clock through the shared buffer. now cannot fail
// with a buffer in memory; if the host says otherwise it broke the ABI,
// and now panics with its message (failing the event).
func now() int64 {
	enter()
	if st := Status(hostNow(outPtr())); st != abi.StatusOK {
		panic(failed(abi.FnNow, "", st))
	}
	ms := int64(binary.LittleEndian.Uint64(out[:8]))
	leave()
	return ms
}

//go:wasmexport ssrun_abi_version
func abiVersion() int32 { return abi.Version }

// ssrun_event_coalesced (abi.ExportCoalesced) says this SDK decodes
// Event.Coalesced.
//
//go:wasmexport ssrun_event_coalesced
func eventCoalesced() int32 { return 1 }

// events keeps the buffers handed to the host by ssrun_alloc alive until
// ssrun_on_event takes them. The host calls the exports one at a time,
// while no other guest code runs.
var events = map[unsafe.Pointer][]byte{}

//go:wasmexport ssrun_alloc
func alloc(size int32) unsafe.Pointer {
	if size <= 0 {
		return nil
	}
	b := make([]byte, size)
	p := bytesPtr(b)
	events[p] = b
	return p
}

//go:wasmexport ssrun_on_event
func onEvent(ptr unsafe.Pointer, n int32) int32 {
	b, ok := events[ptr]
	delete(events, ptr) // the event's Value keeps the buffer alive as long as the rule holds it
	if !ok || n < 0 || int(n) > len(b) {
		logLine(abi.LevelError, fmt.Sprintf("ssrun: event record of %d bytes not in a buffer from ssrun_alloc", n))
		return -1
	}
	return dispatch(b[:n], logLine)
}
