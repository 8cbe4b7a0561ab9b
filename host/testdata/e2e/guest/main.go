// Command guest is the WebAssembly rule of the host's end-to-end tests,
// written with the Go guest SDK. One module plays every role: a copy named
// "<role>.wasm" (or "<role>-<id>.wasm") behaves like testdata/e2e/<role>.lua,
// so each scenario runs the same way on both runtimes. The role comes from
// the rule's name, which the runtime passes as argv[0].
//
// Build (the test does): GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared
// -ldflags=-X=main.tag=v2 -o guest.wasm ./testdata/e2e/guest
package main

import (
	"errors"
	"os"
	"path"
	"strings"
	"time"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// tag names the build, so a reload to another build is visible in what the
// rule writes.
var tag = "v1"

// rawUnwatch is the unwatch import declared again, to misuse the ABI (an
// out-of-range pointer traps).
//
//go:wasmimport ssrun unwatch
func rawUnwatch(keyPtr, keyLen uint32) int32

var hoard [][]byte

func init() {
	name := strings.TrimSuffix(path.Base(os.Args[0]), ".wasm")
	role, id, _ := strings.Cut(name, "-")
	handlers := map[string]func(ssrun.Event) error{
		"react": react, "stream": stream, "healthy": healthy, "fail": fail(id), "perm": perm, "lock": lock(id),
	}
	h, ok := handlers[role]
	if !ok {
		panic("guest: no role " + role)
	}
	key := role + "/in"
	switch role {
	case "fail":
		key = "fail/" + id + "/in"
	case "lock":
		key = "lock/tick/" + id
	}
	if err := ssrun.Watch(key); err != nil {
		panic(err)
	}
	ssrun.Handle(h)
}

func main() {}

func set(key, value string) error {
	_, err := ssrun.Set(key, []byte(value))
	return err
}

// react: react/in -> react/out = "got <value>".
func react(ev ssrun.Event) error {
	if ev.Op != ssrun.OpSet || ev.Key != "react/in" || ev.Version == "" {
		return errors.New("unexpected event " + string(ev.Op) + " " + ev.Key)
	}
	return set("react/out", "got "+string(ev.Value))
}

// stream: each event n is recorded once as stream/handled/<n> = tag; a
// second delivery of n marks stream/dup.
func stream(ev ssrun.Event) error {
	n := string(ev.Value)
	_, err := ssrun.Set("stream/handled/"+n, []byte(tag), ssrun.SetOptions{Cond: ssrun.CondNX})
	if ssrun.StatusOf(err) == ssrun.StatusNotApplied {
		return set("stream/dup", n)
	}
	return err
}

// healthy: healthy/in -> healthy/out, the same value.
func healthy(ev ssrun.Event) error { return set("healthy/out", string(ev.Value)) }

// fail(id) fails the way the value says, or copies it to fail/<id>/out.
func fail(id string) func(ssrun.Event) error {
	return func(ev ssrun.Event) error {
		switch string(ev.Value) {
		case "loop":
			for {
			}
		case "panic":
			panic("the rule panics")
		case "trap":
			rawUnwatch(0xffff0000, 1<<10)
		case "bomb":
			for {
				hoard = append(hoard, make([]byte, 1<<20))
			}
		}
		return set("fail/"+id+"/out", string(ev.Value))
	}
}

// perm tries a write and a read it is not allowed, and records what it got.
func perm(ev ssrun.Event) error {
	_, err := ssrun.Set("secret/x", []byte("leak"))
	if err := set("perm/out/set", ssrun.StatusOf(err).String()+" "+errText(err)); err != nil {
		return err
	}
	_, err = ssrun.Get("secret/y")
	return set("perm/out/get", ssrun.StatusOf(err).String()+" "+errText(err))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// lock(id), on each tick: take the lock "leader" (no wait) and write
// "shared" = id fenced with it; record the status as lock/result/<id> =
// "<status>:<tick value>".
func lock(id string) func(ssrun.Event) error {
	return func(ev ssrun.Event) error {
		_, err := ssrun.Lock("leader", time.Minute)
		if err == nil {
			_, err = ssrun.Set("shared", []byte(id), ssrun.SetOptions{Fence: "leader"})
		}
		return set("lock/result/"+id, ssrun.StatusOf(err).String()+":"+string(ev.Value))
	}
}
