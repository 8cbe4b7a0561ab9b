package main

import (
	"runtime"
	"sync"
	"unsafe"
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
	case "flag-inline":
		for range n {
			if stepBusy {
				panic("step: flag held")
			}
			stepBusy = true
			stepSink++
			stepBusy = false
		}
	case "flag-gosched":
		for range n {
			stepFlagGosched()
		}
	case "call-arg":
		for range n {
			stepCallArg("bench/k")
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

//go:noinline
func stepFlag() {
	for stepBusy {
		panic("step: flag held")
	}
	stepBusy = true
	stepSink++
	stepBusy = false
}

//go:noinline
func stepFlagGosched() {
	for stepBusy {
		runtime.Gosched()
	}
	stepBusy = true
	stepSink++
	stepBusy = false
}

//go:noinline
func stepCallArg(s string) int { return len(s) + stepSink }
