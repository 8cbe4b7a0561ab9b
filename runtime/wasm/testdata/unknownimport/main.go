// Command unknownimport is a rule built with the guest SDK that also
// imports a host function ABI v1 does not have.
package main

import (
	"unsafe"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

//go:wasmimport ssrun get_v2
func getV2(keyPtr unsafe.Pointer, keyLen uint32) int32

func init() {
	ssrun.Handle(func(ev ssrun.Event) error {
		if ev.Key == "v2" {
			getV2(unsafe.Pointer(unsafe.StringData(ev.Key)), uint32(len(ev.Key)))
		}
		return nil
	})
}

func main() {}
