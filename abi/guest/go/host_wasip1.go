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

// fetch returns the result record of a verb that returned st, and the
// verb's real status. On BUFFER_TOO_SMALL it fetches the record with
// `result` into a buffer of its own; otherwise the record is in out (and
// only meaningful if the status carries one). Call with mu held.
func fetch(st Status) ([]byte, Status) {
	for st == abi.StatusBufferTooSmall {
		big := make([]byte, outLen)
		st = Status(hostResult(bytesPtr(big), uint32(len(big)), lenPtr()))
		if st != abi.StatusBufferTooSmall {
			return big[:min(int(outLen), len(big))], st
		}
	}
	return out[:min(int(outLen), outCap)], st
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

// status turns a verb's status into its error. Call with mu held.
func status(verb, key string, st int32) error {
	if Status(st) == abi.StatusOK {
		return nil
	}
	return failure(verb, key, Status(st))
}

func get(key string) (Value, error) {
	mu.Lock()
	defer mu.Unlock()
	rec, st := fetch(Status(hostGet(strPtr(key), uint32(len(key)), outPtr(), outCap, lenPtr())))
	if st != abi.StatusOK {
		return Value{}, failure(abi.FnGet, key, st)
	}
	v, err := parseValue(rec) // a copy: rec may be the shared buffer
	if err != nil {
		return Value{}, badRecord(abi.FnGet, key, err)
	}
	return v, nil
}

func set(key string, value []byte, cond int32, ttlMs int64, fence string) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	rec, st := fetch(Status(hostSet(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), cond, ttlMs,
		strPtr(fence), uint32(len(fence)), outPtr(), outCap, lenPtr())))
	if st != abi.StatusOK && st != abi.StatusNotApplied {
		return "", failure(abi.FnSet, key, st)
	}
	version, err := parseText(rec)
	if err != nil {
		return "", badRecord(abi.FnSet, key, err)
	}
	if st == abi.StatusNotApplied {
		return version, failure(abi.FnSet, key, st)
	}
	return version, nil
}

func del(key, fence string) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnDel, key, hostDel(strPtr(key), uint32(len(key)), strPtr(fence), uint32(len(fence))))
}

func vdel(key string, value []byte, fence string) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnVDel, key, hostVDel(strPtr(key), uint32(len(key)), bytesPtr(value), uint32(len(value)), strPtr(fence), uint32(len(fence))))
}

func watch(key string, flags int32) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnWatch, key, hostWatch(strPtr(key), uint32(len(key)), flags))
}

func unwatch(key string) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnUnwatch, key, hostUnwatch(strPtr(key), uint32(len(key))))
}

func lock(name string, ttlMs, waitMs int64) (string, error) {
	mu.Lock()
	defer mu.Unlock()
	rec, st := fetch(Status(hostLock(strPtr(name), uint32(len(name)), ttlMs, waitMs, outPtr(), outCap, lenPtr())))
	if st != abi.StatusOK {
		return "", failure(abi.FnLock, name, st)
	}
	token, err := parseText(rec)
	if err != nil {
		return "", badRecord(abi.FnLock, name, err)
	}
	return token, nil
}

func unlock(name string) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnUnlock, name, hostUnlock(strPtr(name), uint32(len(name))))
}

func logMsg(level int32, msg string) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnLog, "", hostLog(level, strPtr(msg), uint32(len(msg))))
}

func logLine(level int32, msg string) { _ = logMsg(level, msg) }

func timer(name string, delayMs, everyMs int64, payload []byte) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnTimer, name, hostTimer(strPtr(name), uint32(len(name)), delayMs, everyMs, bytesPtr(payload), uint32(len(payload))))
}

func cancel(name string) error {
	mu.Lock()
	defer mu.Unlock()
	return status(abi.FnCancel, name, hostCancel(strPtr(name), uint32(len(name))))
}

// now reads the host's clock through the shared buffer. now cannot fail
// with a buffer in memory; if the host says otherwise it broke the ABI,
// and now panics with its message (failing the event).
func now() int64 {
	mu.Lock()
	defer mu.Unlock()
	if st := Status(hostNow(outPtr())); st != abi.StatusOK {
		panic(failure(abi.FnNow, "", st))
	}
	return int64(binary.LittleEndian.Uint64(out[:8]))
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
