//go:build wasip1

package ssrun

import (
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

// outCap is the size of the shared result buffer; larger results take the
// BUFFER_TOO_SMALL path and a buffer of their own.
const outCap = 16 << 10

// out and outLen are the shared result buffer, guarded by the guard.
var (
	out    [outCap]byte
	outLen uint32
)

func strPtr(s string) unsafe.Pointer   { return unsafe.Pointer(unsafe.StringData(s)) }
func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
func outPtr() unsafe.Pointer           { return unsafe.Pointer(&out[0]) }
func lenPtr() unsafe.Pointer           { return unsafe.Pointer(&outLen) }

// The verbs below keep their success path in one function: on wasm a call
// of a function that itself calls costs a Go guest about as much as a host
// call (runtime/wasm BenchmarkGuestSteps), so the guard, the parse of the
// result and the carving of its copy are inlined, and only the rare paths
// (a failure, a result larger than the shared buffer, a new result block)
// are calls of their own.

// record returns the result record in the shared buffer. Call with the
// guard held, after a verb that returned a record.
func record() []byte { return out[:min(int(outLen), outCap)] }

// fetch returns the result record of a verb that returned
// BUFFER_TOO_SMALL, fetched with `result` into a buffer of its own, and
// the verb's real status. Call with the guard held.
func fetch() ([]byte, Status) {
	for {
		big := make([]byte, outLen)
		st := Status(hostResult(bytesPtr(big), uint32(len(big)), lenPtr()))
		if st != abi.StatusBufferTooSmall {
			return big[:min(int(outLen), len(big))], st
		}
	}
}

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

// get returns the value's data and version, not a Value: on wasm the Go
// compiler zeroes and copies a result of more than 32 bytes with bulk
// memory instructions, each a call out of the guest in wazero (a Value is
// 40), while Get, inlined in the rule, assembles the Value in registers.
func get(key string) ([]byte, string, error) {
	enter()
	st := Status(hostGet(strPtr(key), uint32(len(key)), outPtr(), outCap, lenPtr()))
	if st != abi.StatusOK {
		return getSlow(key, st)
	}
	// parseValue by hand: the whole record is copied into the current
	// block at once (one copy; its two length prefixes are never read
	// again), and data and version are sliced from the copy.
	rec := record()
	data, rest, ok1 := field(rec)
	version, rest, ok2 := field(rest)
	size := len(rec)
	if !ok1 || !ok2 || len(rest) != 0 || size > len(block) || size > maxCarve {
		return getSlow(key, st)
	}
	buf := block[:size:size]
	block = block[size:]
	copy(buf, rec)
	leave()
	n := len(data)
	if len(version) == 0 {
		return buf[4 : 4+n : 4+n], "", nil
	}
	return buf[4 : 4+n : 4+n], unsafe.String(&buf[8+n], len(version)), nil // never written again
}

// getSlow is get after a status other than OK (a failure, or a value
// larger than the shared buffer) or a result get could not carve from
// the current block. It releases the guard.
//
//go:noinline
func getSlow(key string, st Status) ([]byte, string, error) {
	rec := record()
	if st == abi.StatusBufferTooSmall {
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
	st := Status(hostSet(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), int32(o.Cond), millis(o.TTL),
		strPtr(o.Fence), uint32(len(o.Fence)), outPtr(), outCap, lenPtr()))
	if st != abi.StatusOK {
		return textSlow(abi.FnSet, key, st, true)
	}
	// parseText by hand (see get).
	f, rest, ok := field(record())
	if !ok || len(rest) != 0 || len(f) == 0 || len(f) > len(block) || len(f) > maxCarve {
		return textSlow(abi.FnSet, key, st, true)
	}
	buf := block[:len(f):len(f)]
	block = block[len(f):]
	copy(buf, f)
	leave()
	return unsafe.String(&buf[0], len(buf)), nil // never written again
}

// textSlow is set and lock after a status other than OK (a failure, set's
// NOT_APPLIED with the stored version when notAppliedRec; a result larger
// than the shared buffer) or a result the verb could not carve from the
// current block. It releases the guard.
//
//go:noinline
func textSlow(verb, key string, st Status, notAppliedRec bool) (string, error) {
	rec := record()
	if st == abi.StatusBufferTooSmall {
		rec, st = fetch()
	}
	if st != abi.StatusOK && !(notAppliedRec && st == abi.StatusNotApplied) {
		return "", failed(verb, key, st)
	}
	text, err := parseText(rec)
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
	st := Status(hostLock(strPtr(name), uint32(len(name)), millis(ttl), millis(o.Wait), outPtr(), outCap, lenPtr()))
	if st != abi.StatusOK {
		return textSlow(abi.FnLock, name, st, false)
	}
	// parseText by hand (see get).
	f, rest, ok := field(record())
	if !ok || len(rest) != 0 || len(f) == 0 || len(f) > len(block) || len(f) > maxCarve {
		return textSlow(abi.FnLock, name, st, false)
	}
	buf := block[:len(f):len(f)]
	block = block[len(f):]
	copy(buf, f)
	leave()
	return unsafe.String(&buf[0], len(buf)), nil // never written again
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
