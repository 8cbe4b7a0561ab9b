//go:build wasip1

package ssrun

import (
	"encoding/binary"
	"fmt"
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

// out and outLen are the shared result buffer, guarded by mu.
var (
	out    [outCap]byte
	outLen uint32
)

func strPtr(s string) unsafe.Pointer   { return unsafe.Pointer(unsafe.StringData(s)) }
func bytesPtr(b []byte) unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(b)) }
func outPtr() unsafe.Pointer           { return unsafe.Pointer(&out[0]) }
func lenPtr() unsafe.Pointer           { return unsafe.Pointer(&outLen) }

// The verbs below unlock mu explicitly rather than with defer: a deferred
// call costs a Go guest about as much as a host call, and nothing between
// Lock and Unlock panics (a trap ends the instance anyway).

// fetch returns the result record of a verb that returned st, and the
// verb's real status: in out, or on BUFFER_TOO_SMALL fetched with `result`
// into a buffer of its own (fetchBig). The record is only meaningful if
// the status carries one. Call with mu held.
func fetch(st Status) ([]byte, Status) {
	if st == abi.StatusBufferTooSmall {
		return fetchBig()
	}
	return out[:min(int(outLen), outCap)], st
}

// fetchBig fetches a record larger than out with `result`. Call with mu
// held.
func fetchBig() ([]byte, Status) {
	for {
		big := make([]byte, outLen)
		st := Status(hostResult(bytesPtr(big), uint32(len(big)), lenPtr()))
		if st != abi.StatusBufferTooSmall {
			return big[:min(int(outLen), len(big))], st
		}
	}
}

// failure is the error of a verb that returned st (see verbError). Call
// with mu held.
func failure(verb, key string, st Status) error { return newFailure(verb, key, st) }

// lastError returns the host's message of the last failed call, or "" if
// it cannot be read. Call with mu held.
func lastError() string {
	switch Status(hostLastError(outPtr(), outCap, lenPtr())) {
	case abi.StatusOK:
		return string(out[:min(int(outLen), outCap)])
	case abi.StatusBufferTooSmall:
		big := make([]byte, outLen)
		if Status(hostLastError(bytesPtr(big), uint32(len(big)), lenPtr())) == abi.StatusOK {
			return string(big[:min(int(outLen), len(big))])
		}
	}
	return ""
}

// statusUnlock turns a verb's status into its error and unlocks mu.
// Call with mu held.
func statusUnlock(verb, key string, st int32) error {
	var err error
	if Status(st) != abi.StatusOK {
		err = failure(verb, key, Status(st))
	}
	mu.Unlock()
	return err
}

func get(key string) (Value, error) {
	mu.Lock()
	rec, st := fetch(Status(hostGet(strPtr(key), uint32(len(key)), outPtr(), outCap, lenPtr())))
	var v Value
	var err error
	if st != abi.StatusOK {
		err = failure(abi.FnGet, key, st)
	} else if v, err = parseValue(rec); err != nil { // a copy: rec may be the shared buffer
		err = badRecord(abi.FnGet, key, err)
	}
	mu.Unlock()
	return v, err
}

func set(key string, value []byte, cond int32, ttlMs int64, fence string) (string, error) {
	mu.Lock()
	rec, st := fetch(Status(hostSet(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), cond, ttlMs,
		strPtr(fence), uint32(len(fence)), outPtr(), outCap, lenPtr())))
	var version string
	var err error
	if st != abi.StatusOK && st != abi.StatusNotApplied {
		err = failure(abi.FnSet, key, st)
	} else if version, err = parseText(rec); err != nil {
		err = badRecord(abi.FnSet, key, err)
	} else if st == abi.StatusNotApplied {
		err = failure(abi.FnSet, key, st)
	}
	mu.Unlock()
	return version, err
}

func del(key, fence string) error {
	mu.Lock()
	return statusUnlock(abi.FnDel, key, hostDel(strPtr(key), uint32(len(key)), strPtr(fence), uint32(len(fence))))
}

func vdel(key string, value []byte, fence string) error {
	mu.Lock()
	return statusUnlock(abi.FnVDel, key, hostVDel(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), strPtr(fence), uint32(len(fence))))
}

func watch(key string, flags int32) error {
	mu.Lock()
	return statusUnlock(abi.FnWatch, key, hostWatch(strPtr(key), uint32(len(key)), flags))
}

func unwatch(key string) error {
	mu.Lock()
	return statusUnlock(abi.FnUnwatch, key, hostUnwatch(strPtr(key), uint32(len(key))))
}

func lock(name string, ttlMs, waitMs int64) (string, error) {
	mu.Lock()
	rec, st := fetch(Status(hostLock(strPtr(name), uint32(len(name)), ttlMs, waitMs, outPtr(), outCap, lenPtr())))
	var token string
	var err error
	if st != abi.StatusOK {
		err = failure(abi.FnLock, name, st)
	} else if token, err = parseText(rec); err != nil {
		err = badRecord(abi.FnLock, name, err)
	}
	mu.Unlock()
	return token, err
}

func unlock(name string) error {
	mu.Lock()
	return statusUnlock(abi.FnUnlock, name, hostUnlock(strPtr(name), uint32(len(name))))
}

func logMsg(level int32, msg string) error {
	mu.Lock()
	return statusUnlock(abi.FnLog, "", hostLog(level, strPtr(msg), uint32(len(msg))))
}

func logLine(level int32, msg string) { _ = logMsg(level, msg) }

func timer(name string, delayMs, everyMs int64, payload []byte) error {
	mu.Lock()
	return statusUnlock(abi.FnTimer, name, hostTimer(strPtr(name), uint32(len(name)), delayMs, everyMs, bytesPtr(payload), uint32(len(payload))))
}

func cancel(name string) error {
	mu.Lock()
	return statusUnlock(abi.FnCancel, name, hostCancel(strPtr(name), uint32(len(name))))
}

// now reads the host's clock through the shared buffer. now cannot fail
// with a buffer in memory; if the host says otherwise it broke the ABI,
// and now panics with its message (failing the event).
func now() int64 {
	mu.Lock()
	st := Status(hostNow(outPtr()))
	ms := int64(binary.LittleEndian.Uint64(out[:8]))
	var err error
	if st != abi.StatusOK {
		err = failure(abi.FnNow, "", st)
	}
	mu.Unlock()
	if err != nil {
		panic(err)
	}
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
