package wasm

import (
	"context"
	"encoding/binary"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// The host functions of ABI revision 2 (abi/doc.go): timer, cancel and
// now. A module built for revision 1 imports none of them and loads as
// before; hostFuncs lists them after the revision-1 functions.

// hostTimer arms the rule's timer. The payload is lent to the Host (a view
// of guest memory, its range checked: outside memory traps), which copies
// what it keeps and decides whether it is too large (TOO_LARGE).
// Negative durations go to the Host, which refuses them with INVALID; only a
// count of milliseconds no time.Duration holds is refused here.
func hostTimer(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	name := c.key(mem, abi.FnTimer, "name", s[0], s[1])
	payload := mem.lent(abi.FnTimer, "payload", s[4], s[5])
	delay, every, err := timerArgs(name, int64(s[2]), int64(s[3]))
	if err == nil {
		err = c.host.Timer(ctx, name, delay, abi.TimerOptions{Every: every, Payload: payload})
	}
	return c.status(err)
}

func hostCancel(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	return c.status(c.host.Cancel(ctx, c.key(mem, abi.FnCancel, "name", s[0], s[1])))
}

// hostNow writes the host's clock, u64 little-endian Unix milliseconds, at
// out_ptr.
func hostNow(_ context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	binary.LittleEndian.PutUint64(mem.view(abi.FnNow, "out", s[0], 8), uint64(c.host.Now()))
	return c.status(nil)
}

// signedMillis converts a guest duration in milliseconds, keeping its sign
// (the Host judges negative ones); false when time.Duration cannot hold it.
func signedMillis(ms int64) (time.Duration, bool) {
	if ms < -maxMillis || ms > maxMillis {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// timerArgs decodes timer's durations.
func timerArgs(name string, delayMs, everyMs int64) (delay, every time.Duration, err error) {
	delay, ok := signedMillis(delayMs)
	if !ok {
		return 0, 0, abi.Errorf(abi.StatusInvalid, "timer %q: delay %d ms out of range", name, delayMs)
	}
	every, ok = signedMillis(everyMs)
	if !ok {
		return 0, 0, abi.Errorf(abi.StatusInvalid, "timer %q: every %d ms out of range", name, everyMs)
	}
	return delay, every, nil
}
