// Command rule is the test plugin of runtime/plugin: a rule built with the
// SDK whose handler runs the command named by the event key, with the
// arguments in the event value (fields as in abi.AppendField), and reports
// through Host.Log at info level as "report ..." lines.
//
// Init refuses to start when the key "init/fail" exists, hangs when
// "init/hang" exists, and otherwise watches "init/watched" with self.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/sdk"
)

func main() {
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

func report(h sdk.Host, verb string, err error, results ...any) {
	msg, typed := "", true
	if err != nil {
		var e *abi.Error
		msg, typed = err.Error(), errors.As(err, &e)
	}
	line := fmt.Sprintf("report %s status=%s msg=%q", verb, abi.StatusOf(err), msg)
	if !typed {
		line += " untyped"
	}
	for i := 0; i+1 < len(results); i += 2 {
		line += fmt.Sprintf(" %v=%v", results[i], results[i+1])
	}
	h.Log(abi.LevelInfo, line)
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

func handle(ctx context.Context, h sdk.Host, ev abi.Event) error {
	if ev.Key == "event" { // report the event as received
		report(h, "event", nil, "op", ev.Op, "value", show(ev.Value), "version", strconv.Quote(ev.Version), "resync", ev.Resync)
		return nil
	}
	var a []string
	if ev.Op == abi.OpSet {
		a = fields(ev.Value)
	}
	switch ev.Key {
	case "get":
		v, err := h.Get(ctx, a[0])
		report(h, "get", err, "value", show(v.Data), "version", strconv.Quote(v.Version))
	case "set":
		version, err := h.Set(ctx, a[0], []byte(a[1]), abi.SetOptions{Cond: abi.Condition(number(a[2])), TTL: duration(a[3]), Fence: a[4]})
		report(h, "set", err, "version", strconv.Quote(version))
	case "del":
		report(h, "del", h.Del(ctx, a[0], abi.DelOptions{Fence: a[1]}))
	case "vdel":
		report(h, "vdel", h.VDel(ctx, a[0], []byte(a[1]), abi.DelOptions{Fence: a[2]}))
	case "watch":
		report(h, "watch", h.Watch(ctx, a[0], abi.WatchOptions{Self: a[1] == "self"}))
	case "unwatch":
		report(h, "unwatch", h.Unwatch(ctx, a[0]))
	case "lock":
		token, err := h.Lock(ctx, a[0], duration(a[1]), abi.LockOptions{Wait: duration(a[2])})
		report(h, "lock", err, "token", strconv.Quote(token))
	case "unlock":
		report(h, "unlock", h.Unlock(ctx, a[0]))
	case "log":
		h.Log(int32(number(a[0])), a[1])
		report(h, "log", nil)
	case "pid":
		report(h, "pid", nil, "pid", os.Getpid())
	case "print": // a line on stdout, a line on stderr, a partial line on stdout
		fmt.Println(a[0])
		fmt.Fprintln(os.Stderr, a[1])
		fmt.Print(a[2])
		report(h, "print", nil)
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
		return abi.Errorf(abi.Status(number(a[0])), "failed on purpose")
	case "plainfail":
		return errors.New("plain failure")
	case "loop": // call a verb n times (benchmarks)
		return loop(ctx, h, a[0], number(a[1]))
	case "noop":
	default:
		return fmt.Errorf("unknown command %q", ev.Key)
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
