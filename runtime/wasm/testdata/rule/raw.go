package main

import (
	"unsafe"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// Raw imports of verbs, to measure a verb's host call without the SDK.

//go:wasmimport ssrun get
func rawGet(keyPtr unsafe.Pointer, keyLen uint32, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:wasmimport ssrun del
func rawDel(keyPtr unsafe.Pointer, keyLen uint32, fencePtr unsafe.Pointer, fenceLen uint32) int32

var (
	rawOut    [256]byte
	rawOutLen uint32
)

// rawVerb makes the host call of a bench row without the SDK: "raw-get"
// gets bench/k into a static buffer, "raw-del" deletes an absent key
// (NOT_FOUND) and leaves the message with the host.
func rawVerb(verb string) {
	var st, want int32
	switch verb {
	case "raw-get":
		key := "bench/k"
		st = rawGet(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(&rawOut[0]), uint32(len(rawOut)), unsafe.Pointer(&rawOutLen))
	case "raw-del":
		key := "absent"
		st, want = rawDel(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), nil, 0), int32(ssrun.StatusNotFound)
	}
	if st != want {
		panic(verb + ": status " + ssrun.Status(st).String())
	}
}

// other is the value the "vdel" bench row compares with bench/k's.
var other = []byte("other")

// expect panics unless err has status want (the bench rows whose outcome
// is a failure).
func expect(err error, want ssrun.Status) {
	if ssrun.StatusOf(err) != want {
		panic(err)
	}
}
