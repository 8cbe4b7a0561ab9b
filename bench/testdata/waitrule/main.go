// Command waitrule is the plugin rule of the per-key concurrency benchmark
// (bench BenchmarkConcurrency): a handler that waits 5 ms (for a lock, a
// device, a remote service) and does nothing else. It watches
// wait/<name>/0 to wait/<name>/31, name being its executable's file name,
// so copies of it under different names (and concurrency settings) each
// watch their own keys.
package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

// Keys is how many keys each copy watches.
const Keys = 32

// Wait is how long each event's handler waits.
const Wait = 5 * time.Millisecond

func main() {
	sdk.Serve(sdk.Rule{Init: initRule, Handle: handle})
}

func initRule(ctx context.Context, h sdk.Host) error {
	name := filepath.Base(os.Args[0])
	for i := range Keys {
		if err := h.Watch(ctx, "wait/"+name+"/"+strconv.Itoa(i), abi.WatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func handle(ctx context.Context, _ sdk.Host, _ abi.Event) error {
	t := time.NewTimer(Wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
