// Command wrongversion is a reactor that implements the ssrun exports by hand
// but declares ABI version 2.
package main

import "unsafe"

//go:wasmexport ssrun_abi_version
func abiVersion() int32 { return 2 }

var buffers = map[unsafe.Pointer][]byte{}

//go:wasmexport ssrun_alloc
func alloc(size int32) unsafe.Pointer {
	b := make([]byte, size)
	p := unsafe.Pointer(unsafe.SliceData(b))
	buffers[p] = b
	return p
}

//go:wasmexport ssrun_on_event
func onEvent(ptr unsafe.Pointer, _ int32) int32 {
	delete(buffers, ptr)
	return 0
}

func main() {}
