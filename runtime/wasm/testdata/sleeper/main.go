// Command sleeper is a test guest of runtime/wasm that sleeps with Go's
// time.Sleep: in its initialisation for the duration stored under the key
// "sleep/init" when there is one (the load check's store is unavailable, so
// the check never sleeps), and in its handler for the duration in the
// event's value. It logs "sleeping" before each sleep and "slept <d>" after.
package main

import (
	"time"

	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

func init() {
	ssrun.Handle(func(ev ssrun.Event) error { return sleep(string(ev.Value)) })
	if v, err := ssrun.Get("sleep/init"); err == nil {
		if err := sleep(string(v.Data)); err != nil {
			panic(err)
		}
	}
}

func main() {}

func sleep(arg string) error {
	d, err := time.ParseDuration(arg)
	if err != nil {
		return err
	}
	if err := ssrun.Log(ssrun.LevelInfo, "sleeping"); err != nil {
		return err
	}
	start := time.Now()
	time.Sleep(d)
	return ssrun.Log(ssrun.LevelInfo, "slept "+time.Since(start).String())
}
