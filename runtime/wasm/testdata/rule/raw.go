package main

import (
	"unsafe"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// Raw imports of verbs, to measure a verb's host call without the SDK.

//go:wasmimport ssrun get
func rawGet(keyPtr unsafe.Pointer, keyLen uint32, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:wasmimport ssrun set
func rawSet(keyPtr unsafe.Pointer, keyLen uint32, valPtr unsafe.Pointer, valLen uint32, cond int32, ttlMs int64,
	fencePtr unsafe.Pointer, fenceLen uint32, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:wasmimport ssrun del
func rawDel(keyPtr unsafe.Pointer, keyLen uint32, fencePtr unsafe.Pointer, fenceLen uint32) int32

var (
	rawOut    [256]byte
	rawOutLen uint32
)

// rawGetOnce gets bench/k into a static buffer without the SDK.
func rawGetOnce() {
	key := "bench/k"
	rawCheck("raw-get", rawGet(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(&rawOut[0]), uint32(len(rawOut)), unsafe.Pointer(&rawOutLen)), ssrun.StatusOK)
}

// rawSetOnce sets bench/k to value, its version into a static buffer,
// without the SDK.
func rawSetOnce(value []byte) {
	key := "bench/k"
	rawCheck("raw-set", rawSet(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), unsafe.Pointer(unsafe.SliceData(value)), uint32(len(value)), 0, 0,
		nil, 0, unsafe.Pointer(&rawOut[0]), uint32(len(rawOut)), unsafe.Pointer(&rawOutLen)), ssrun.StatusOK)
}

// rawDelOnce deletes an absent key (NOT_FOUND) without the SDK, leaving
// the message with the host.
func rawDelOnce() {
	key := "absent"
	rawCheck("raw-del", rawDel(unsafe.Pointer(unsafe.StringData(key)), uint32(len(key)), nil, 0), ssrun.StatusNotFound)
}

func rawCheck(verb string, st int32, want ssrun.Status) {
	if ssrun.Status(st) != want {
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
