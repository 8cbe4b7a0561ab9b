// Package plugintest is the code of runtime/plugin's test rule that does not
// depend on running in a process of its own: its Init and the commands of
// its handler that work the same in a plugin binary (testdata/rule, which
// adds the commands about processes and output) and served in the test's
// own process (the runtime's inprocess_test.go).
//
// Handle runs the command named by the event key, with the arguments in the
// event value (fields as in abi.AppendField), and reports through
// Host.Log at info level as "report ..." lines; the verbs are the commands
// of internal/ruletest.
package plugintest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

// Init refuses to start when the key "init/fail" exists, hangs when
// "init/hang" exists, and otherwise watches "init/watched" with self.
func Init(ctx context.Context, h abi.Host) error {
	if v, err := h.Get(ctx, "init/fail"); err == nil {
		return abi.Errorf(abi.StatusDenied, "init refused: %s", v.Data)
	}
	if _, err := h.Get(ctx, "init/hang"); err == nil {
		select {}
	}
	return h.Watch(ctx, "init/watched", abi.WatchOptions{Self: true})
}

// Handle runs the command of ev:
//
//	event               report the event as received
//	seq <n>             set seen/<n> to n (record that this event was handled)
//	fail <status>       fail with that status and "failed on purpose"
//	plainfail           fail with an error that is not an *abi.Error
//	panic               panic with "boom"
//	loop <verb> <n>     call verb n times with arguments that succeed (benchmarks)
//	late <key>          return; then, from a goroutine, once the event's ctx
//	                    ended, set key to "late" and log "late <status>"
//	concurrent <n>      n goroutines at once each set conc/<i> to i and get it
//	                    back; report "concurrent" with the first error and
//	                    "ok" (how many read their own value back)
//	gate                one goroutine gets gate (a host that answers once
//	                    open is set, see the runtime's gateHost), another,
//	                    once the first is about to call, gets gate/waiting
//	                    until it is found, then sets open; report "gate"
//	waitcancel          set inflight, wait for the event's ctx to end (no
//	                    host call meanwhile), then log "waitcancel <ctx error>"
//	                    and fail with it
//	atend (<key> <value> <nx|->)...  sdk.SetAtEnd each (nx: CONDITION_NX), from
//	                    one buffer overwritten after each; then get the first
//	                    key and report it as "atend" (found=false: not yet set)
//
// and the commands of ruletest.Dispatch (the verbs and noop).
func Handle(ctx context.Context, h abi.Host, ev abi.Event) error {
	if ev.Key == "event" {
		ruletest.ReportEvent(h, ev)
		return nil
	}
	a := ruletest.Args(ev)
	switch ev.Key {
	case "seq":
		_, err := h.Set(ctx, "seen/"+a[0], []byte(a[0]), abi.SetOptions{})
		return err
	case "fail":
		return abi.Errorf(abi.Status(ruletest.Number(a[0])), "failed on purpose")
	case "plainfail":
		return errors.New("plain failure")
	case "panic":
		panic("boom")
	case "loop":
		return loop(ctx, h, a[0], ruletest.Number(a[1]))
	case "concurrent":
		return concurrent(ctx, h, ruletest.Number(a[0]))
	case "gate":
		ready := make(chan struct{})
		var wg sync.WaitGroup
		var gateErr, openErr error
		wg.Go(func() {
			close(ready)
			_, gateErr = h.Get(ctx, "gate")
		})
		wg.Go(func() {
			<-ready
			for {
				_, err := h.Get(ctx, "gate/waiting")
				if err == nil {
					break
				}
				if abi.StatusOf(err) != abi.StatusNotFound {
					openErr = err
					return
				}
			}
			_, openErr = h.Set(ctx, "open", []byte("1"), abi.SetOptions{})
		})
		wg.Wait()
		ruletest.Report(h, "gate", errors.Join(gateErr, openErr))
		return nil
	case "waitcancel":
		if _, err := h.Set(ctx, "inflight", []byte("1"), abi.SetOptions{}); err != nil {
			return err
		}
		<-ctx.Done()
		h.Log(abi.LevelInfo, "waitcancel "+ctx.Err().Error())
		return ctx.Err()
	case "atend":
		var buf []byte
		for i := 0; i+2 < len(a); i += 3 {
			buf = append(buf[:0], a[i+1]...)
			var opts abi.SetOptions
			if a[i+2] == "nx" {
				opts.Cond = abi.CondNX
			}
			if err := sdk.SetAtEnd(ctx, h, a[i], buf, opts); err != nil {
				return err
			}
			copy(buf, "XXXXXXXXXXXXXXXX") // the write must not see this
		}
		_, err := h.Get(ctx, a[0])
		ruletest.Report(h, "atend", nil, "found", err == nil)
		return nil
	case "late":
		go func() {
			<-ctx.Done()
			_, err := h.Set(context.Background(), a[0], []byte("late"), abi.SetOptions{})
			h.Log(abi.LevelInfo, "late "+abi.StatusOf(err).String())
		}()
		return nil
	default:
		return ruletest.Dispatch(ctx, h, ev)
	}
}

// concurrent runs n goroutines that each set conc/<i> and get it back, at
// once, and reports how many read their own value.
func concurrent(ctx context.Context, h abi.Host, n int) error {
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	ok := 0
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			k, v := fmt.Sprintf("conc/%d", i), strconv.Itoa(i)
			_, err := h.Set(ctx, k, []byte(v), abi.SetOptions{})
			var got abi.Value
			if err == nil {
				got, err = h.Get(ctx, k)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			if err == nil && string(got.Data) == v {
				ok++
			}
		})
	}
	close(start)
	wg.Wait()
	ruletest.Report(h, "concurrent", first, "ok", ok)
	return nil
}

// loop calls verb n times with arguments that succeed.
func loop(ctx context.Context, h abi.Host, verb string, n int) error {
	val := []byte("value")
	if _, err := h.Set(ctx, "bench", val, abi.SetOptions{}); err != nil {
		return err
	}
	for range n {
		var err error
		switch verb {
		case abi.FnGet:
			_, err = h.Get(ctx, "bench")
		case abi.FnSet:
			_, err = h.Set(ctx, "bench", val, abi.SetOptions{})
		case abi.FnDel: // del of an absent key: NOT_FOUND is the expected answer
			if err = h.Del(ctx, "absent", abi.DelOptions{}); abi.StatusOf(err) == abi.StatusNotFound {
				err = nil
			}
		case abi.FnVDel: // vdel of a differing value: NOT_APPLIED
			if err = h.VDel(ctx, "bench", []byte("other"), abi.DelOptions{}); abi.StatusOf(err) == abi.StatusNotApplied {
				err = nil
			}
		case abi.FnWatch:
			err = h.Watch(ctx, "bench", abi.WatchOptions{})
		case abi.FnUnwatch: // NOT_FOUND after the first
			if err = h.Unwatch(ctx, "bench"); abi.StatusOf(err) == abi.StatusNotFound {
				err = nil
			}
		case abi.FnLock: // held: returns the token
			_, err = h.Lock(ctx, "benchlock", time.Minute, abi.LockOptions{})
		case abi.FnUnlock: // NOT_FOUND after the first
			if err = h.Unlock(ctx, "benchlock"); abi.StatusOf(err) == abi.StatusNotFound {
				err = nil
			}
		case abi.FnLog:
			h.Log(abi.LevelDebug, "bench")
		case abi.FnTimer: // re-arms the same timer
			err = h.Timer(ctx, "benchtimer", time.Hour, abi.TimerOptions{Payload: val})
		case abi.FnCancel: // NOT_FOUND after the first
			if err = h.Cancel(ctx, "benchtimer"); abi.StatusOf(err) == abi.StatusNotFound {
				err = nil
			}
		case abi.FnNow:
			h.Now()
		case abi.FnKeys: // revision 3
			_, err = h.Keys(ctx, "bench*", abi.KeysOptions{})
		case abi.FnWatchPattern:
			err = h.WatchPattern(ctx, "bench*", abi.WatchOptions{})
		case abi.FnUnwatchPattern: // NOT_FOUND after the first
			if err = h.UnwatchPattern(ctx, "bench*"); abi.StatusOf(err) == abi.StatusNotFound {
				err = nil
			}
		default:
			return fmt.Errorf("loop: unknown verb %q", verb)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
