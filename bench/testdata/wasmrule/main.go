// Command wasmrule is the Go WebAssembly rule of the benchmarks in package
// bench, built with the guest SDK:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -ldflags=-X=main.tag=A ./bench/testdata/wasmrule
//
// It watches wasm/in and wasm/trigger. Events:
//
//   - wasm/in: GET wasm/in, then SET wasm/out to its value (the end-to-end
//     throughput rule);
//   - wasm/trigger: SET wasm/tagged to "<tag>:<value>" (hot reload: the tag
//     says which build handled the event);
//   - noop: nothing (the event round trip);
//   - verb, value "<verb> <n>": call one ABI verb n times (see verbs.go).
package main

import (
	"errors"
	"strconv"
	"strings"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// tag names the build; set with -ldflags=-X=main.tag=...
var tag = "A"

func init() {
	for _, k := range []string{"wasm/in", "wasm/trigger"} {
		if err := ssrun.Watch(k); err != nil {
			panic(err)
		}
	}
	ssrun.Handle(handle)
}

func main() {}

func handle(ev ssrun.Event) error {
	switch ev.Key {
	case "wasm/in":
		v, err := ssrun.Get("wasm/in")
		if err != nil {
			return err
		}
		_, err = ssrun.Set("wasm/out", v.Data)
		return err
	case "wasm/trigger":
		_, err := ssrun.Set("wasm/tagged", append([]byte(tag+":"), ev.Value...))
		return err
	case "noop":
		return nil
	case "verb":
		verb, count, _ := strings.Cut(string(ev.Value), " ")
		n, err := strconv.Atoi(count)
		if err != nil {
			return errors.New("verb event " + strconv.Quote(string(ev.Value)) + ": bad count")
		}
		return loop(verb, n)
	}
	return errors.New("unknown event key " + strconv.Quote(ev.Key))
}
