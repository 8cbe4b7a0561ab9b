package main

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
	ssrun "github.com/ssrun/ssrun/abi/guest/go"
)

// host presents the SDK's functions as an abi.Host, for ruletest.Dispatch.
// The contexts are ignored: the runtime bounds each handler call.
type host struct{}

var _ abi.Host = host{}

func (host) Get(_ context.Context, key string) (abi.Value, error) { return ssrun.Get(key) }

func (host) Set(_ context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	return ssrun.Set(key, value, opts)
}

func (host) Del(_ context.Context, key string, opts abi.DelOptions) error {
	return ssrun.Del(key, opts)
}

func (host) VDel(_ context.Context, key string, value []byte, opts abi.DelOptions) error {
	return ssrun.VDel(key, value, opts)
}

func (host) Watch(_ context.Context, key string, opts abi.WatchOptions) error {
	return ssrun.Watch(key, opts)
}

func (host) Unwatch(_ context.Context, key string) error { return ssrun.Unwatch(key) }

func (host) Lock(_ context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	return ssrun.Lock(name, ttl, opts)
}

func (host) Unlock(_ context.Context, name string) error { return ssrun.Unlock(name) }

// Log panics when the SDK's Log fails (abi.Host.Log has no error), so the
// event fails rather than a report going missing quietly.
func (host) Log(level int32, msg string) {
	if err := ssrun.Log(level, msg); err != nil {
		panic(err)
	}
}

func (host) Timer(_ context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	return ssrun.Timer(name, delay, opts)
}

func (host) Cancel(_ context.Context, name string) error { return ssrun.Cancel(name) }

func (host) Now() int64 { return ssrun.Now() }

func (host) Keys(_ context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	return ssrun.Keys(pattern, opts)
}

func (host) WatchPattern(_ context.Context, pattern string, opts abi.WatchOptions) error {
	return ssrun.WatchPattern(pattern, opts)
}

func (host) UnwatchPattern(_ context.Context, pattern string) error {
	return ssrun.UnwatchPattern(pattern)
}
