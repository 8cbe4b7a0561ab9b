package main

import (
	"errors"
	"time"
	"unsafe"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// rawLastError is the bare host call of the floor: a real ABI host function
// that looks up its caller and writes 4 bytes, nothing else.
//
//go:wasmimport ssrun last_error
func rawLastError(outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

var value = []byte("0123456789abcdef")

// loop calls verb n times. Every runtime's bench rule runs the same calls
// with the same outcomes: get of a present key; set; del of an absent key
// (NOT_FOUND); vdel with a differing value (NOT_APPLIED); watch of a
// watched key (idempotent); unwatch of an unwatched key (NOT_FOUND after
// the first); lock of a held lock (its token); unlock of an unheld lock
// (NOT_FOUND after the first); log at debug level; timer re-arming one
// name; cancel of an unarmed timer (NOT_FOUND); now. It picks the verb
// once and then runs a loop of that verb alone, so that neither the verb
// nor the floor pays a per-call dispatch.
func loop(verb string, n int) error {
	var outLen uint32
	var err error
	switch verb {
	case "floor":
		for range n {
			rawLastError(nil, 0, unsafe.Pointer(&outLen))
		}
	case "get":
		for i := 0; i < n && err == nil; i++ {
			_, err = ssrun.Get("bench/k")
		}
	case "set":
		for i := 0; i < n && err == nil; i++ {
			_, err = ssrun.Set("bench/k", value)
		}
	case "del":
		for i := 0; i < n && err == nil; i++ {
			err = expect(ssrun.Del("absent"), ssrun.StatusNotFound)
		}
	case "vdel":
		for i := 0; i < n && err == nil; i++ {
			err = expect(ssrun.VDel("bench/k", []byte("other")), ssrun.StatusNotApplied)
		}
	case "watch":
		for i := 0; i < n && err == nil; i++ {
			err = ssrun.Watch("bench/w")
		}
	case "unwatch":
		for i := 0; i < n && err == nil; i++ {
			err = expect(ssrun.Unwatch("bench/u"), ssrun.StatusNotFound)
		}
	case "lock":
		for i := 0; i < n && err == nil; i++ {
			_, err = ssrun.Lock("bench/l", time.Minute)
		}
	case "unlock":
		for i := 0; i < n && err == nil; i++ {
			err = expect(ssrun.Unlock("bench/u"), ssrun.StatusNotFound)
		}
	case "log":
		for i := 0; i < n && err == nil; i++ {
			err = ssrun.Log(ssrun.LevelDebug, "bench")
		}
	case "timer":
		for i := 0; i < n && err == nil; i++ {
			err = ssrun.Timer("bench/t", time.Minute)
		}
	case "cancel":
		for i := 0; i < n && err == nil; i++ {
			err = expect(ssrun.Cancel("bench/c"), ssrun.StatusNotFound)
		}
	case "now":
		for range n {
			ssrun.Now()
		}
	case "keys": // revision 3: keys lists bench/k; unwatch_pattern meets NOT_FOUND
		for i := 0; i < n && err == nil; i++ {
			_, err = ssrun.Keys("bench/*")
		}
	case "watch_pattern":
		for i := 0; i < n && err == nil; i++ {
			err = ssrun.WatchPattern("bench/p*")
		}
	case "unwatch_pattern":
		for i := 0; i < n && err == nil; i++ {
			err = expect(ssrun.UnwatchPattern("bench/none*"), ssrun.StatusNotFound)
		}
	default:
		return errors.New("unknown verb " + verb)
	}
	return err
}

// expect treats the status want as the expected outcome.
func expect(err error, want ssrun.Status) error {
	if ssrun.StatusOf(err) == want {
		return nil
	}
	return err
}
