// Command panicker is a WebAssembly rule whose handler panics on every
// event of panic/in: the SDK logs the panic with its stack trace, a
// message of many lines.
//
// Build (the test does): GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
// -o panicker.wasm ./testdata/panicker
package main

import ssrun "github.com/ssrun/ssrun/abi/guest/go"

func init() {
	if err := ssrun.Watch("panic/in"); err != nil {
		panic(err)
	}
	ssrun.Handle(func(ev ssrun.Event) error { panic("boom: " + string(ev.Value)) })
}

func main() {}
