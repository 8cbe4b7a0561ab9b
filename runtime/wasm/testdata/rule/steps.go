package main

import (
	"errors"
	"runtime"
	"sync"
	"unsafe"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// step runs one of the guest's elementary steps n times, for
// BenchmarkGuestSteps: what a Go call, a mutex, a defer, an allocation
// cost a Go guest, next to the floor host call.
func step(name string, n int) {
	var outLen uint32
	switch name {
	case "floor":
		for range n {
			rawLastError(nil, 0, unsafe.Pointer(&outLen))
		}
	case "empty": // the loop alone
		for range n {
			stepSink++
		}
	case "call": // a call of a function that is not inlined
		for range n {
			stepCall()
		}
	case "mutex": // sync.Mutex Lock and Unlock
		for range n {
			stepMu.Lock()
			stepSink++
			stepMu.Unlock()
		}
	case "defer": // a call whose function unlocks with defer
		for range n {
			stepDefer()
		}
	case "flag": // the flag guard the SDK uses on wasip1
		for range n {
			stepFlag()
		}
	case "flag-inline": // the flag guard inline
		for range n {
			if stepBusy {
				panic("step: flag held")
			}
			stepBusy = true
			stepSink++
			stepBusy = false
		}
	case "rawget-inline": // the get host call, no function of its own
		key := "bench/k"
		for range n {
			if rawGet(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(&rawOut[0]), uint32(len(rawOut)), unsafe.Pointer(&rawOutLen)) != 0 {
				panic("rawget")
			}
		}
	case "rawget-fn": // the get host call in a function of its own
		for range n {
			rawGetOnce()
		}
	case "rawget-ret": // and a return of a Value
		for range n {
			v, err := stepGetRet()
			if err != nil {
				panic(err)
			}
			stepBytes = v.Data
		}
	case "alloc16": // a 16-byte heap allocation
		for range n {
			stepBytes = make([]byte, 16)
		}
	case "alloc64":
		for range n {
			stepBytes = make([]byte, 64)
		}
	case "string16": // a 16-byte string conversion (an allocation and a copy)
		b := []byte("0123456789abcdef")
		for range n {
			stepString = string(b)
		}
	default:
		panic("unknown step " + name)
	}
}

var (
	stepSink   int
	stepMu     sync.Mutex
	stepBusy   bool
	stepBytes  []byte
	stepString string
)

//go:noinline
func stepCall() { stepSink++ }

//go:noinline
func stepDefer() {
	stepMu.Lock()
	defer stepMu.Unlock()
	stepSink++
}

// stepFlag is a function with the SDK's flag guard: it calls only on its
// slow path, and so is a function that calls.
//
//go:noinline
func stepFlag() {
	for stepBusy {
		runtime.Gosched()
	}
	stepBusy = true
	stepSink++
	stepBusy = false
}

var stepBlock [1 << 10]byte

// stepGetRet is the get host call and the copy of its result, returned as
// a Value (without parsing the record).
//
//go:noinline
func stepGetRet() (ssrun.Value, error) {
	key := "bench/k"
	if st := rawGet(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(&rawOut[0]), uint32(len(rawOut)), unsafe.Pointer(&rawOutLen)); st != 0 {
		return ssrun.Value{}, errStep
	}
	n := copy(stepBlock[:], rawOut[:min(int(rawOutLen), len(rawOut))])
	return ssrun.Value{Data: stepBlock[:n:n], Version: unsafe.String(&stepBlock[0], 4)}, nil
}

var errStep = errors.New("step failed")
