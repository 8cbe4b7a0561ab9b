// Command manyrule is the Go WebAssembly rule of the many-rules benchmark
// in package bench (many_test.go), built with the guest SDK:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared ./bench/testdata/manyrule
//
// Every copy of the rule runs the same module, so it learns which rule it is
// from its file name, which the runtime passes as its first argument:
// "<anything>-<i>-of-<n>.wasm" makes it rule i of a key space of n keys. It
// watches the ten keys many/k/<(2i+j) mod n> (j = 0..9, as ruleKeys in
// many_test.go does) and handles a SET of any of them by setting
// many/out/<i> to the value; DELETEs are ignored.
package main

import (
	"errors"
	"os"
	"path"
	"strconv"
	"strings"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// out is the key this copy writes.
var out string

func init() {
	i, n, err := parseName(os.Args[0])
	if err != nil {
		panic(err)
	}
	out = "many/out/" + strconv.Itoa(i)
	for j := range 10 {
		if err := ssrun.Watch("many/k/" + strconv.Itoa((2*i+j)%n)); err != nil {
			panic(err)
		}
	}
	ssrun.Handle(handle)
}

func main() {}

// parseName reads i and n from a file name "<anything>-<i>-of-<n>.wasm".
func parseName(name string) (i, n int, err error) {
	f := strings.Split(strings.TrimSuffix(path.Base(name), ".wasm"), "-")
	if len(f) >= 3 && f[len(f)-2] == "of" {
		i, err = strconv.Atoi(f[len(f)-3])
		if err == nil {
			n, err = strconv.Atoi(f[len(f)-1])
		}
		if err == nil && i >= 0 && n > 0 {
			return i, n, nil
		}
	}
	return 0, 0, errors.New("manyrule: file name " + strconv.Quote(name) + " is not <anything>-<i>-of-<n>.wasm")
}

func handle(ev ssrun.Event) error {
	if ev.Op != ssrun.OpSet {
		return nil
	}
	_, err := ssrun.Set(out, ev.Value)
	return err
}
