//go:build !wasip1

package ssrun

import (
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Outside a WebAssembly rule there is no host: every verb fails, and Now is
// the local clock.

func notWasm(verb, key string) error {
	return abi.Errorf(abi.StatusUnavailable, "%s %q: ssrun verbs work only inside a rule built with GOOS=wasip1 GOARCH=wasm", verb, key)
}

func get(key string) ([]byte, string, error) { return nil, "", notWasm(abi.FnGet, key) }

func set(key string, _ []byte, opts []SetOptions) (string, error) {
	if _, err := one(abi.FnSet, key, opts); err != nil {
		return "", err
	}
	return "", notWasm(abi.FnSet, key)
}

func del(key string, opts []DelOptions) error {
	if _, err := one(abi.FnDel, key, opts); err != nil {
		return err
	}
	return notWasm(abi.FnDel, key)
}

func vdel(key string, _ []byte, opts []DelOptions) error {
	if _, err := one(abi.FnVDel, key, opts); err != nil {
		return err
	}
	return notWasm(abi.FnVDel, key)
}

func watch(key string, opts []WatchOptions) error {
	if _, err := one(abi.FnWatch, key, opts); err != nil {
		return err
	}
	return notWasm(abi.FnWatch, key)
}

func unwatch(key string) error { return notWasm(abi.FnUnwatch, key) }

func lock(name string, _ time.Duration, opts []LockOptions) (string, error) {
	if _, err := one(abi.FnLock, name, opts); err != nil {
		return "", err
	}
	return "", notWasm(abi.FnLock, name)
}

func unlock(name string) error       { return notWasm(abi.FnUnlock, name) }
func logMsg(_ int32, _ string) error { return notWasm(abi.FnLog, "") }

func timer(name string, _ time.Duration, opts []TimerOptions) error {
	if _, err := one(abi.FnTimer, name, opts); err != nil {
		return err
	}
	return notWasm(abi.FnTimer, name)
}

func cancel(name string) error { return notWasm(abi.FnCancel, name) }
func now() int64               { return time.Now().UnixMilli() }

// lastError: no host keeps a message.
func lastError() string { return "" }
