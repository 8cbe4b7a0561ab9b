// Command rule is the test plugin of runtime/plugin: a rule built with the
// SDK whose handler runs the command named by the event key, with the
// arguments in the event value (fields as in abi.AppendField), and reports
// through Host.Log at info level as "report ..." lines. The verbs are the
// commands of internal/ruletest; those here test what is particular to
// plugins (processes, output, failures, benchmarks).
//
// Init refuses to start when the key "init/fail" exists, hangs when
// "init/hang" exists, and otherwise watches "init/watched" with self.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

func main() {
	if len(os.Args) == 2 { // one of the process tree's descendants (tree.go)
		descendant(os.Args[1])
	}
	sdk.Serve(sdk.Rule{Init: initRule, Handle: handle})
}

func initRule(ctx context.Context, h sdk.Host) error {
	if v, err := h.Get(ctx, "init/fail"); err == nil {
		return abi.Errorf(abi.StatusDenied, "init refused: %s", v.Data)
	}
	if _, err := h.Get(ctx, "init/hang"); err == nil {
		select {}
	}
	return h.Watch(ctx, "init/watched", abi.WatchOptions{Self: true})
}

func handle(ctx context.Context, h sdk.Host, ev abi.Event) error {
	if ev.Key == "event" { // report the event as received
		ruletest.Report(h, "event", nil, "op", ev.Op, "value", ruletest.Show(ev.Value), "version", strconv.Quote(ev.Version), "resync", ev.Resync)
		return nil
	}
	a := ruletest.Args(ev)
	switch ev.Key {
	case "pid":
		ruletest.Report(h, "pid", nil, "pid", os.Getpid())
	case "print": // a line on stdout, a line on stderr, a partial line on stdout
		fmt.Println(a[0])
		fmt.Fprintln(os.Stderr, a[1])
		fmt.Print(a[2])
		ruletest.Report(h, "print", nil)
	case "spawn": // start descendants (tree.go); report the pids
		pids, err := spawn()
		if err != nil {
			return err
		}
		list := strconv.Itoa(os.Getpid())
		for _, pid := range pids {
			list += "," + strconv.Itoa(pid)
		}
		ruletest.Report(h, "spawn", nil, "pids", list)
	case "stderr": // lines on the original stderr (fd 2), past go-plugin's redirection: plain, then hclog JSON
		_, _ = syscall.Write(2, []byte(a[0]+"\n"))
		_, _ = syscall.Write(2, []byte(`{"@level":"error","@message":"`+a[1]+`","@timestamp":"2026-01-02T03:04:05.000000Z","k":"v"}`+"\n"))
		ruletest.Report(h, "stderr", nil)
	case "seq": // record that this event was handled
		_, err := h.Set(ctx, "seen/"+a[0], []byte(a[0]), abi.SetOptions{})
		return err
	case "hold": // say so, then never answer
		if _, err := h.Set(ctx, "inflight", []byte(strconv.Itoa(os.Getpid())), abi.SetOptions{}); err != nil {
			return err
		}
		select {}
	case "hang":
		select {}
	case "exit":
		os.Exit(3)
	case "panic":
		panic("boom")
	case "fail":
		return abi.Errorf(abi.Status(ruletest.Number(a[0])), "failed on purpose")
	case "plainfail":
		return errors.New("plain failure")
	case "loop": // call a verb n times (benchmarks)
		return loop(ctx, h, a[0], ruletest.Number(a[1]))
	default: // the verbs and noop
		return ruletest.Dispatch(ctx, h, ev)
	}
	return nil
}

// loop calls verb n times with arguments that succeed.
func loop(ctx context.Context, h sdk.Host, verb string, n int) error {
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
		default:
			return fmt.Errorf("loop: unknown verb %q", verb)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
