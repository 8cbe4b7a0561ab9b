// Command sleeper is a WebAssembly rule that sleeps for an hour where its
// name says, ignoring its deadline (a WASI sleep that the runtime may not
// be able to interrupt): "sleep-init.wasm" in its initialisation,
// "sleep-handler.wasm" in its handler for sleep/in. Before sleeping it
// prints "sleeping in <where>", so a test knows it got there.
//
// Build (the test does): GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
// -o sleeper.wasm ./testdata/sleeper
package main

import (
	"fmt"
	"os"
	"path"
	"time"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

func sleep(where string) {
	fmt.Println("sleeping in " + where)
	time.Sleep(time.Hour)
}

func init() {
	switch path.Base(os.Args[0]) {
	case "sleep-init.wasm":
		sleep("init")
	case "sleep-handler.wasm":
		if err := ssrun.Watch("sleep/in"); err != nil {
			panic(err)
		}
		ssrun.Handle(func(ssrun.Event) error {
			sleep("handler")
			return nil
		})
	}
}

func main() {}
