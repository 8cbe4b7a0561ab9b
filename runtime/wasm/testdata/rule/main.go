// Command rule is the test guest of runtime/wasm: a rule built with the Go
// guest SDK whose handler runs the command named by the event key, with the
// arguments in the event value (fields as in abi.AppendField). The verbs are
// the commands of internal/ruletest, reporting through the SDK's Log; the
// commands here test what is particular to WASM (output, sandbox, traps,
// limits) and print their "report ..." lines on stdout.
package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"time"
	"unsafe"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// Raw imports, declared again to misuse or measure the ABI directly.

//go:wasmimport ssrun unwatch
func rawUnwatch(keyPtr, keyLen uint32) int32

//go:wasmimport ssrun last_error
func rawLastError(outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

func init() {
	if err := ssrun.Watch("init/watched", ssrun.WatchOptions{Self: true}); err != nil {
		panic(err)
	}
	ssrun.Handle(handle)
}

func main() {}

func handle(ev ssrun.Event) error {
	if ev.Key == "event" { // report the event as received
		ruletest.ReportEvent(host{}, ev)
		return nil
	}
	a := ruletest.Args(ev)
	switch ev.Key {
	case "set-twice-opts":
		_, err := ssrun.Set(a[0], nil, ssrun.SetOptions{}, ssrun.SetOptions{})
		ruletest.Report(host{}, "set", err)

	case "echo":
		_, err := ssrun.Set("echo/"+a[0], []byte(a[1]))
		return err
	case "print":
		fmt.Print("out line 1\nout line 2\npartial")
		fmt.Fprintln(os.Stderr, "err line")
	case "env":
		start := time.Now()
		time.Sleep(20 * time.Millisecond)
		slept := time.Since(start)
		buf := make([]byte, 16)
		_, randErr := rand.Read(buf)
		_, fsErr := os.ReadFile("/etc/hostname")
		fmt.Printf("report env args=%q environ=%d fs=%t now=%d slept=%d rand=%x randerr=%v\n",
			os.Args, len(os.Environ()), fsErr == nil, time.Now().UnixNano(), slept.Nanoseconds(), buf, randErr)

	case "error":
		return errors.New("the rule says no")
	case "abi-error":
		_, err := ssrun.Get("absent")
		return err
	case "panic":
		panic("rule panics")
	case "exit":
		os.Exit(3)
	case "trap": // an out-of-range pointer: ABI misuse
		rawUnwatch(0xffff0000, 1<<10)
	case "loop":
		fmt.Println("report looping")
		for {
		}
	case "bomb":
		for {
			hoard = append(hoard, make([]byte, 1<<20))
		}

	case "bench":
		bench(a[0], ruletest.Number(a[1]))
	case "step":
		step(a[0], ruletest.Number(a[1]))
	case "allocs":
		allocs(a[0], ruletest.Number(a[1]))
	case "errtext":
		errText()
	case "ownmem":
		reportCheck("ownmem", ownMemory())
	case "errreuse":
		reportCheck("errreuse", errorReuse())
	case "concurrent":
		reportCheck("concurrent", concurrently())
	default: // the verbs and noop
		return ruletest.Dispatch(context.Background(), host{}, ev)
	}
	return nil
}

var hoard [][]byte

// bench calls one verb n times (see bench_test.go). It picks the verb once
// and then runs a loop of that verb alone, so that a row's time is the
// verb's and not the dispatch's.
func bench(verb string, n int) {
	value := []byte("0123456789abcdef")
	var outLen uint32
	switch verb {
	case "floor":
		for range n {
			rawLastError(nil, 0, unsafe.Pointer(&outLen))
		}
	case "raw-get":
		for range n {
			rawGetOnce()
		}
	case "raw-del":
		for range n {
			rawDelOnce()
		}
	case "raw-set":
		for range n {
			rawSetOnce(value)
		}
	case "get":
		for range n {
			_, err := ssrun.Get("bench/k")
			must(err)
		}
	case "set":
		for range n {
			_, err := ssrun.Set("bench/k", value)
			must(err)
		}
	case "set-literal": // a value built in the call, on the stack unless the SDK lets it escape
		for range n {
			_, err := ssrun.Set("bench/k", []byte("0123456789abcdef"))
			must(err)
		}
	case "set+del":
		for range n {
			_, err := ssrun.Set("bench/d", value)
			must(err)
			must(ssrun.Del("bench/d"))
		}
	case "set+vdel":
		for range n {
			_, err := ssrun.Set("bench/d", value)
			must(err)
			must(ssrun.VDel("bench/d", value))
		}
	case "watch":
		for range n {
			must(ssrun.Watch("bench/w"))
		}
	case "watch+unwatch":
		for range n {
			must(ssrun.Watch("bench/u"))
			must(ssrun.Unwatch("bench/u"))
		}
	case "unwatch": // NOT_FOUND
		for range n {
			expect(ssrun.Unwatch("bench/absent"), ssrun.StatusNotFound)
		}
	case "lock":
		for range n {
			_, err := ssrun.Lock("bench/l", time.Minute)
			must(err)
		}
	case "lock+unlock":
		for range n {
			_, err := ssrun.Lock("bench/m", time.Minute)
			must(err)
			must(ssrun.Unlock("bench/m"))
		}
	case "unlock": // NOT_FOUND
		for range n {
			expect(ssrun.Unlock("bench/absent"), ssrun.StatusNotFound)
		}
	case "log":
		for range n {
			must(ssrun.Log(ssrun.LevelDebug, "bench"))
		}
	case "timer":
		for range n {
			must(ssrun.Timer("bench/t", time.Minute, ssrun.TimerOptions{Payload: value}))
		}
	case "timer+cancel":
		for range n {
			must(ssrun.Timer("bench/c", time.Minute, ssrun.TimerOptions{Payload: value}))
			must(ssrun.Cancel("bench/c"))
		}
	case "cancel": // NOT_FOUND
		for range n {
			expect(ssrun.Cancel("bench/absent"), ssrun.StatusNotFound)
		}
	case "now":
		for range n {
			ssrun.Now()
		}
	case "del": // NOT_FOUND
		for range n {
			expect(ssrun.Del("absent"), ssrun.StatusNotFound)
		}
	case "vdel": // NOT_APPLIED
		for range n {
			expect(ssrun.VDel("bench/k", other), ssrun.StatusNotApplied)
		}
	default:
		panic("unknown bench verb " + verb)
	}
}

// must panics on err (the bench rows whose outcome is a success).
func must(err error) {
	if err != nil {
		panic(err)
	}
}
