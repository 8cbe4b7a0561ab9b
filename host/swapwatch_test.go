package host

import (
	"bytes"
	"context"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// A new version may call Watch at any time, also while the host installs
// it (a plugin's goroutines run on their own): a watch made while the swap
// applies the version's initial watches is applied once the version is
// live, not lost and not a crash.
func TestWatchDuringSwapIsApplied(t *testing.T) {
	e := newEnv(t)
	var mu sync.Mutex
	var v2 abi.Host
	p := e.load("swapper", goRule{init: watchInit("a")})
	e.rt.register("swapper-v2", goRule{init: func(ctx context.Context, h abi.Host) error {
		mu.Lock()
		v2 = h
		mu.Unlock()
		return h.Watch(ctx, "b", abi.WatchOptions{})
	}})
	e.write(p, "swapper-v2")

	// Hold the registry so that the swap stops in it, registering "b".
	resume := e.host.reg.Pause()
	loaded := make(chan error, 1)
	go func() { loaded <- e.host.Load(e.ctx(), p) }()
	waitFor(t, "the swap waiting in the registry", func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("watch.(*Registry).acquire"))
	})
	mu.Lock()
	h := v2
	mu.Unlock()
	watched := make(chan error, 1)
	go func() { watched <- h.Watch(e.ctx(), "c", abi.WatchOptions{}) }()
	resume()
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	if err := <-watched; err != nil {
		t.Fatalf("watch during the swap: %v", err)
	}
	got := e.status("swapper").Watches
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Fatalf("watches %v, want [b c]", got)
	}
	if n := e.host.Stats().WatchedKeys; n != 2 {
		t.Fatalf("%d keys registered with the store, want 2", n)
	}
}
