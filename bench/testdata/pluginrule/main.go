// Command pluginrule is the native plugin rule of the benchmarks in package
// bench, built with the plugin SDK (go build -o <rules>/pluginrule
// ./bench/testdata/pluginrule). It watches plugin/in, plugin/atend/in and
// plugin/trigger. Events:
//
//   - plugin/in: GET plugin/in, then SET plugin/out to its value (the
//     end-to-end throughput rule);
//   - plugin/atend/in: the same into plugin/atend/out, the SET made with
//     sdk.SetAtEnd (it goes with the event's end);
//   - plugin/trigger: SET plugin/tagged to "A:<value>";
//   - noop: nothing (the event round trip);
//   - verb, value "<verb> <n>": call one ABI verb n times, with the same
//     calls and outcomes as bench/testdata/wasmrule.
package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

func main() {
	sdk.Serve(sdk.Rule{Init: initRule, Handle: handle})
}

func initRule(ctx context.Context, h sdk.Host) error {
	for _, k := range []string{"plugin/in", "plugin/atend/in", "plugin/trigger"} {
		if err := h.Watch(ctx, k, abi.WatchOptions{}); err != nil {
			return err
		}
	}
	return nil
}

func handle(ctx context.Context, h sdk.Host, ev abi.Event) error {
	switch ev.Key {
	case "plugin/in":
		v, err := h.Get(ctx, "plugin/in")
		if err != nil {
			return err
		}
		_, err = h.Set(ctx, "plugin/out", v.Data, abi.SetOptions{})
		return err
	case "plugin/atend/in":
		v, err := h.Get(ctx, "plugin/atend/in")
		if err != nil {
			return err
		}
		return sdk.SetAtEnd(ctx, h, "plugin/atend/out", v.Data, abi.SetOptions{})
	case "plugin/trigger":
		_, err := h.Set(ctx, "plugin/tagged", append([]byte("A:"), ev.Value...), abi.SetOptions{})
		return err
	case "noop":
		return nil
	case "verb":
		verb, count, _ := strings.Cut(string(ev.Value), " ")
		n, err := strconv.Atoi(count)
		if err != nil {
			return fmt.Errorf("verb event %q: bad count", ev.Value)
		}
		return loop(ctx, h, verb, n)
	}
	return fmt.Errorf("unknown event key %q", ev.Key)
}

var value = []byte("0123456789abcdef")

// loop calls verb n times (see bench/testdata/wasmrule/verbs.go).
func loop(ctx context.Context, h sdk.Host, verb string, n int) error {
	var err error
	for range n {
		switch verb {
		case "get":
			_, err = h.Get(ctx, "bench/k")
		case "set":
			_, err = h.Set(ctx, "bench/k", value, abi.SetOptions{})
		case "del":
			err = expect(h.Del(ctx, "absent", abi.DelOptions{}), abi.StatusNotFound)
		case "vdel":
			err = expect(h.VDel(ctx, "bench/k", []byte("other"), abi.DelOptions{}), abi.StatusNotApplied)
		case "watch":
			err = h.Watch(ctx, "bench/w", abi.WatchOptions{})
		case "unwatch":
			err = expect(h.Unwatch(ctx, "bench/u"), abi.StatusNotFound)
		case "lock":
			_, err = h.Lock(ctx, "bench/l", time.Minute, abi.LockOptions{})
		case "unlock":
			err = expect(h.Unlock(ctx, "bench/u"), abi.StatusNotFound)
		case "log":
			h.Log(abi.LevelDebug, "bench")
		case "timer":
			err = h.Timer(ctx, "bench/t", time.Minute, abi.TimerOptions{})
		case "cancel":
			err = expect(h.Cancel(ctx, "bench/c"), abi.StatusNotFound)
		case "now":
			h.Now()
		case "keys": // revision 3
			_, err = h.Keys(ctx, "bench/*", abi.KeysOptions{})
		case "watch_pattern":
			err = h.WatchPattern(ctx, "bench/p*", abi.WatchOptions{})
		case "unwatch_pattern":
			err = expect(h.UnwatchPattern(ctx, "bench/none*"), abi.StatusNotFound)
		default:
			return fmt.Errorf("unknown verb %q", verb)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", verb, err)
		}
	}
	return nil
}

// expect treats the status want as the expected outcome.
func expect(err error, want abi.Status) error {
	if abi.StatusOf(err) == want {
		return nil
	}
	return err
}
