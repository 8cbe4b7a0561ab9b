// Package ruletest is the command protocol shared by the Go test rules of
// runtime/wasm and runtime/plugin (their testdata/rule), and the test
// helpers that drive them.
//
// A test sends an event whose Key names a command and whose Value packs
// the command's arguments as fields (abi.AppendField; see Command). The
// rule runs the command against its host and logs one line
// "report <verb> status=<STATUS> msg=<quoted message>[ untyped][ name=value...]"
// at info level (see Report); the test reads it back with Reports or Run.
//
// The guest side (this file) uses only the standard library and package
// abi, because the WASM rule builds it for GOOS=wasip1.
package ruletest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Dispatch runs the shared command ev.Key names, with the arguments packed
// in ev.Value, against h, and reports its result through h.Log:
//
//	get <key>                              value, version
//	set <key> <value> <cond> <ttl> <fence> version
//	del <key> <fence>
//	vdel <key> <value> <fence>
//	watch <key> <"self" or "">
//	unwatch <key>
//	lock <name> <ttl> <wait>               token
//	unlock <name>
//	log <level> <message>
//	timer <name> <delay> <every> <payload> (revision 2)
//	cancel <name>                          (revision 2)
//	now                                    ms (revision 2)
//	keys, watch_pattern, unwatch_pattern   (revision 3: see dispatchPattern)
//	noop                                   (no report)
//
// Durations are in time.ParseDuration's syntax, numbers decimal. A rule
// handles its own commands first and passes the others here; an unknown
// command is an error. Malformed arguments panic: the rule is a test
// fixture, and the panic fails the event.
func Dispatch(ctx context.Context, h abi.Host, ev abi.Event) error {
	a := Args(ev)
	switch ev.Key {
	case "get":
		v, err := h.Get(ctx, a[0])
		Report(h, "get", err, "value", Show(v.Data), "version", strconv.Quote(v.Version))
	case "set":
		version, err := h.Set(ctx, a[0], []byte(a[1]), abi.SetOptions{Cond: abi.Condition(Number(a[2])), TTL: duration(a[3]), Fence: a[4]})
		Report(h, "set", err, "version", strconv.Quote(version))
	case "del":
		Report(h, "del", h.Del(ctx, a[0], abi.DelOptions{Fence: a[1]}))
	case "vdel":
		Report(h, "vdel", h.VDel(ctx, a[0], []byte(a[1]), abi.DelOptions{Fence: a[2]}))
	case "watch":
		Report(h, "watch", h.Watch(ctx, a[0], abi.WatchOptions{Self: a[1] == "self"}))
	case "unwatch":
		Report(h, "unwatch", h.Unwatch(ctx, a[0]))
	case "lock":
		token, err := h.Lock(ctx, a[0], duration(a[1]), abi.LockOptions{Wait: duration(a[2])})
		Report(h, "lock", err, "token", strconv.Quote(token))
	case "unlock":
		Report(h, "unlock", h.Unlock(ctx, a[0]))
	case "log":
		h.Log(int32(Number(a[0])), a[1])
		Report(h, "log", nil)
	case "timer":
		Report(h, "timer", h.Timer(ctx, a[0], duration(a[1]), abi.TimerOptions{Every: duration(a[2]), Payload: []byte(a[3])}))
	case "cancel":
		Report(h, "cancel", h.Cancel(ctx, a[0]))
	case "now":
		Report(h, "now", nil, "ms", h.Now())
	case "noop":
	default:
		if !dispatchPattern(ctx, h, ev.Key, a) {
			return fmt.Errorf("unknown command %q", ev.Key)
		}
	}
	return nil
}

// ReportEvent logs the report line of an "event" command: the event as the
// rule received it (see EventReport).
func ReportEvent(h abi.Host, ev abi.Event) {
	h.Log(abi.LevelInfo, "report "+EventReport(ev))
}

// EventReport is the report line (without "report ") a rule logs for the
// event ev with ReportEvent: every field of the event, binary-safely.
func EventReport(ev abi.Event) string {
	return fmt.Sprintf("event op=%s key=%q value=%s version=%q resync=%t deadline=%d late=%t",
		ev.Op, ev.Key, Show(ev.Value), ev.Version, ev.Resync, ev.Deadline, ev.Late)
}

// Report logs the report line of verb through h at info level: err's
// status and message (" untyped" when err is not an *abi.Error), then each
// name=value pair of results.
func Report(h abi.Host, verb string, err error, results ...any) {
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

// Show renders a value binary-safely: "nil", "x" and its hex when at most
// 64 bytes, else its length and SHA-256 ("<n>B:<hex>").
func Show(b []byte) string {
	switch {
	case b == nil:
		return "nil"
	case len(b) <= 64:
		return "x" + hex.EncodeToString(b)
	}
	return fmt.Sprintf("%dB:%x", len(b), sha256.Sum256(b))
}

// Args returns the arguments of the command ev: the fields of its value
// for a SET event, none otherwise. It panics on a malformed value.
func Args(ev abi.Event) []string {
	if ev.Op != abi.OpSet {
		return nil
	}
	var out []string
	for b := ev.Value; len(b) > 0; {
		f, rest, err := abi.ReadField(b)
		if err != nil {
			panic(err)
		}
		out = append(out, string(f))
		b = rest
	}
	return out
}

// Number parses a decimal argument; it panics when s is not one.
func Number(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

func duration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}
