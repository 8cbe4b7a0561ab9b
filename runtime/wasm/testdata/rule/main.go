// Command rule is the test guest of runtime/wasm: a rule built with the Go
// guest SDK whose handler runs the command named by the event key, with the
// arguments in the event value (fields as in abi.AppendField), and prints
// "report ..." lines on stdout for the test to check.
package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"
	"unsafe"

	"github.com/ssrun/ssrun/abi"
	ssrun "github.com/ssrun/ssrun/abi/guest/go"
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

// show prints a value binary-safely: nil, hex, or length and SHA-256.
func show(b []byte) string {
	switch {
	case b == nil:
		return "nil"
	case len(b) <= 64:
		return "x" + hex.EncodeToString(b)
	}
	return fmt.Sprintf("%dB:%x", len(b), sha256.Sum256(b))
}

func report(verb string, err error, results ...any) {
	msg, typed := "", true
	if err != nil {
		var e *ssrun.Error
		msg, typed = err.Error(), errors.As(err, &e)
	}
	line := fmt.Sprintf("report %s status=%s msg=%q", verb, ssrun.StatusOf(err), msg)
	if !typed {
		line += " untyped"
	}
	for i := 0; i+1 < len(results); i += 2 {
		line += fmt.Sprintf(" %v=%v", results[i], results[i+1])
	}
	fmt.Println(line)
}

func fields(b []byte) []string {
	var out []string
	for len(b) > 0 {
		f, rest, err := abi.ReadField(b)
		if err != nil {
			panic(err)
		}
		out = append(out, string(f))
		b = rest
	}
	return out
}

func duration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

func number(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

var hoard [][]byte

func handle(ev ssrun.Event) error {
	if ev.Key == "event" { // report the event as received
		fmt.Printf("report event op=%s key=%q value=%s version=%q resync=%t\n", ev.Op, ev.Key, show(ev.Value), ev.Version, ev.Resync)
		return nil
	}
	var a []string
	if ev.Op == ssrun.OpSet {
		a = fields(ev.Value)
	}
	switch ev.Key {
	case "get":
		v, err := ssrun.Get(a[0])
		report("get", err, "value", show(v.Data), "version", strconv.Quote(v.Version))
	case "set":
		version, err := ssrun.Set(a[0], []byte(a[1]), ssrun.SetOptions{Cond: ssrun.Condition(number(a[2])), TTL: duration(a[3]), Fence: a[4]})
		report("set", err, "version", strconv.Quote(version))
	case "set-twice-opts":
		_, err := ssrun.Set(a[0], nil, ssrun.SetOptions{}, ssrun.SetOptions{})
		report("set", err)
	case "del":
		report("del", ssrun.Del(a[0], ssrun.DelOptions{Fence: a[1]}))
	case "vdel":
		report("vdel", ssrun.VDel(a[0], []byte(a[1]), ssrun.DelOptions{Fence: a[2]}))
	case "watch":
		report("watch", ssrun.Watch(a[0], ssrun.WatchOptions{Self: a[1] == "self"}))
	case "unwatch":
		report("unwatch", ssrun.Unwatch(a[0]))
	case "lock":
		token, err := ssrun.Lock(a[0], duration(a[1]), ssrun.LockOptions{Wait: duration(a[2])})
		report("lock", err, "token", strconv.Quote(token))
	case "unlock":
		report("unlock", ssrun.Unlock(a[0]))
	case "log":
		report("log", ssrun.Log(int32(number(a[0])), a[1]))

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

	case "noop":
	case "bench":
		bench(a[0], number(a[1]))
	default:
		return fmt.Errorf("unknown command %q", ev.Key)
	}
	return nil
}

// bench calls one verb n times (see bench_test.go).
func bench(verb string, n int) {
	value := []byte("0123456789abcdef")
	var outLen uint32
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	for range n {
		switch verb {
		case "floor":
			rawLastError(nil, 0, unsafe.Pointer(&outLen))
		case "get":
			_, err := ssrun.Get("bench/k")
			must(err)
		case "set":
			_, err := ssrun.Set("bench/k", value)
			must(err)
		case "set+del":
			_, err := ssrun.Set("bench/d", value)
			must(err)
			must(ssrun.Del("bench/d"))
		case "set+vdel":
			_, err := ssrun.Set("bench/d", value)
			must(err)
			must(ssrun.VDel("bench/d", value))
		case "watch":
			must(ssrun.Watch("bench/w"))
		case "watch+unwatch":
			must(ssrun.Watch("bench/u"))
			must(ssrun.Unwatch("bench/u"))
		case "lock":
			_, err := ssrun.Lock("bench/l", time.Minute)
			must(err)
		case "lock+unlock":
			_, err := ssrun.Lock("bench/m", time.Minute)
			must(err)
			must(ssrun.Unlock("bench/m"))
		case "log":
			must(ssrun.Log(ssrun.LevelDebug, "bench"))
		default:
			panic("unknown bench verb " + verb)
		}
	}
}
