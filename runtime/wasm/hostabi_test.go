package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// Guest memory layout used with the hand-made guest (one 64 KiB page).
const (
	atKey    = 0x100
	atFence  = 0x300
	atValue  = 0x400
	atOutLen = 0x800
	atOut    = 0x1000
	atOut2   = 0x4000
	memBytes = 1 << 16
)

// handABI calls the hand-made guest's call_<fn> exports directly, so tests
// drive the host functions with exact pointers and lengths.
type handABI struct {
	t *testing.T
	s *script
	h *abitest.Host
}

func newHandABI(t *testing.T) *handABI {
	t.Helper()
	h := abitest.New()
	s := start(t, compile(t, sharedRuntime(t), "hand.wasm", handGuest(nil).bytes()), h, abi.Limits{})
	return &handABI{t: t, s: s, h: h}
}

func (c *handABI) mem() api.Memory { return c.s.in.mod.Memory() }

func (c *handABI) write(addr uint32, b []byte) {
	c.t.Helper()
	if !c.mem().Write(addr, b) {
		c.t.Fatalf("write %d bytes at %#x", len(b), addr)
	}
}

func (c *handABI) read(addr, n uint32) []byte {
	c.t.Helper()
	b, ok := c.mem().Read(addr, n)
	if !ok {
		c.t.Fatalf("read %d bytes at %#x", n, addr)
	}
	return bytes.Clone(b)
}

func (c *handABI) outLen() uint32 {
	v, _ := c.mem().ReadUint32Le(atOutLen)
	return v
}

// fill writes a sentinel pattern over the out buffers and out_len.
func (c *handABI) fill() {
	c.write(atOut, bytes.Repeat([]byte{0xaa}, 0x3000))
	c.write(atOut2, bytes.Repeat([]byte{0xaa}, 0x3000))
	c.mem().WriteUint32Le(atOutLen, 0xdeadbeef)
}

func (c *handABI) try(fn string, args ...uint64) (abi.Status, error) {
	res, err := c.s.in.mod.ExportedFunction("call_"+fn).Call(context.Background(), args...)
	if err != nil {
		return 0, err
	}
	return abi.Status(api.DecodeI32(res[0])), nil
}

func (c *handABI) call(fn string, args ...uint64) abi.Status {
	c.t.Helper()
	st, err := c.try(fn, args...)
	if err != nil {
		c.t.Fatalf("%s: %v", fn, err)
	}
	return st
}

func (c *handABI) expect(what string, got, want abi.Status) {
	c.t.Helper()
	if got != want {
		c.t.Fatalf("%s: status %s, want %s", what, got, want)
	}
}

// lastError reads last_error through a roomy buffer.
func (c *handABI) lastError() string {
	c.t.Helper()
	c.expect("last_error", c.call(abi.FnLastError, atOut2, 0x1000, atOutLen), abi.StatusOK)
	return string(c.read(atOut2, c.outLen()))
}

func i64arg(v int64) uint64 { return api.EncodeI64(v) }

// TestResultProtocol follows abi/doc.go "Results": records, out_len,
// BUFFER_TOO_SMALL, `result` (repeatable, real status), `last_error`.
func TestResultProtocol(t *testing.T) {
	c := newHandABI(t)
	c.write(atKey, []byte("k"))
	value := bytes.Repeat([]byte("v"), 100)
	version := c.h.Put("k", value)
	record := abi.AppendField(abi.AppendField(nil, value), []byte(version))

	// get: record fits.
	c.fill()
	c.expect("get", c.call(abi.FnGet, atKey, 1, atOut, 0x1000, atOutLen), abi.StatusOK)
	if c.outLen() != uint32(len(record)) || !bytes.Equal(c.read(atOut, c.outLen()), record) {
		t.Fatalf("get record %q (len %d), want %q", c.read(atOut, c.outLen()), c.outLen(), record)
	}

	// get: record too large. Nothing written to out, the needed length at
	// out_len, and the store is not asked again by `result`.
	c.fill()
	c.expect("get small buffer", c.call(abi.FnGet, atKey, 1, atOut, 16, atOutLen), abi.StatusBufferTooSmall)
	if c.outLen() != uint32(len(record)) {
		t.Fatalf("out_len %d, want %d", c.outLen(), len(record))
	}
	if !bytes.Equal(c.read(atOut, 16), bytes.Repeat([]byte{0xaa}, 16)) {
		t.Fatal("BUFFER_TOO_SMALL wrote into the buffer")
	}
	c.expect("result still small", c.call(abi.FnResult, atOut2, 16, atOutLen), abi.StatusBufferTooSmall)
	for i := range 2 { // `result` leaves the record in place
		c.fill()
		c.expect(fmt.Sprintf("result #%d", i), c.call(abi.FnResult, atOut2, uint64(len(record)), atOutLen), abi.StatusOK)
		if got := c.read(atOut2, c.outLen()); !bytes.Equal(got, record) {
			t.Fatalf("result #%d record %q", i, got)
		}
	}
	if n := c.h.Calls(abi.FnGet); n != 2 {
		t.Fatalf("host get called %d times, want 2 (result must not repeat it)", n)
	}
	if msg := c.lastError(); msg != "" {
		t.Fatalf("last_error %q before any failure", msg)
	}

	// A failure: no record, out_len untouched, message via last_error.
	c.write(atKey, []byte("absent"))
	c.fill()
	c.expect("get absent", c.call(abi.FnGet, atKey, 6, atOut, 0x1000, atOutLen), abi.StatusNotFound)
	if c.outLen() != 0xdeadbeef {
		t.Fatalf("out_len written (%d) for a status without a record", c.outLen())
	}
	const msg = `get "absent": not found`
	c.expect("last_error small", c.call(abi.FnLastError, atOut2, 3, atOutLen), abi.StatusBufferTooSmall)
	if c.outLen() != uint32(len(msg)) {
		t.Fatalf("last_error needs %d, want %d", c.outLen(), len(msg))
	}
	if got := c.lastError(); got != msg {
		t.Fatalf("last_error %q, want %q", got, msg)
	}
	if got := c.lastError(); got != msg {
		t.Fatalf("last_error again %q, want %q", got, msg)
	}
	// The failed verb replaced the kept record: result has nothing.
	c.expect("result after a failure", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusInvalid)
	if got := c.lastError(); !strings.HasPrefix(got, "result: no result record") {
		t.Fatalf("last_error after a bad result %q", got)
	}

	// set NOT_APPLIED carries the stored version; through `result` the
	// real status comes back.
	c.write(atKey, []byte("k"))
	c.write(atValue, []byte("x"))
	c.expect("set nx too small", c.call(abi.FnSet, atKey, 1, atValue, 1, uint64(abi.CondNX), 0, atFence, 0, atOut, 0, atOutLen), abi.StatusBufferTooSmall)
	c.expect("result of set", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusNotApplied)
	if got, want := c.read(atOut2, c.outLen()), abi.AppendField(nil, []byte(version)); !bytes.Equal(got, want) {
		t.Fatalf("set NOT_APPLIED record %q, want %q", got, want)
	}
	if got := c.lastError(); got != `set "k": not applied` {
		t.Fatalf("last_error %q", got)
	}

	// lock: token record; a verb without results then clears the record.
	c.write(atKey, []byte("L"))
	c.expect("lock", c.call(abi.FnLock, atKey, 1, i64arg(1000), 0, atOut, 0x1000, atOutLen), abi.StatusOK)
	tok, rest, err := abi.ReadField(c.read(atOut, c.outLen()))
	if err != nil || len(rest) != 0 || len(tok) == 0 {
		t.Fatalf("lock record: token %q rest %q err %v", tok, rest, err)
	}
	c.expect("unlock", c.call(abi.FnUnlock, atKey, 1), abi.StatusOK)
	c.expect("result after unlock", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusInvalid)
}

// TestArgumentValidation: scalar arguments out of their domain are INVALID,
// with a message, and never reach the Host.
func TestArgumentValidation(t *testing.T) {
	cases := []struct {
		fn   string
		args []uint64
		msg  string
	}{
		{abi.FnSet, []uint64{atKey, 1, atValue, 1, 3, 0, atFence, 0, atOut, 64, atOutLen}, `set "k": unknown condition 3 (want 0 none, 1 NX, 2 NEX)`},
		{abi.FnSet, []uint64{atKey, 1, atValue, 1, api.EncodeI32(-1), 0, atFence, 0, atOut, 64, atOutLen}, `set "k": unknown condition -1 (want 0 none, 1 NX, 2 NEX)`},
		{abi.FnSet, []uint64{atKey, 1, atValue, 1, 0, i64arg(-5), atFence, 0, atOut, 64, atOutLen}, `set "k": ttl -5 ms out of range`},
		{abi.FnSet, []uint64{atKey, 1, atValue, 1, 0, i64arg(maxMillis + 1), atFence, 0, atOut, 64, atOutLen}, fmt.Sprintf(`set "k": ttl %d ms out of range`, maxMillis+1)},
		{abi.FnWatch, []uint64{atKey, 1, 2}, `watch "k": unknown flags 0x2`},
		{abi.FnWatch, []uint64{atKey, 1, api.EncodeI32(-1)}, `watch "k": unknown flags 0xffffffff`},
		{abi.FnLock, []uint64{atKey, 1, i64arg(-1), 0, atOut, 64, atOutLen}, `lock "k": ttl -1 ms out of range`},
		{abi.FnLock, []uint64{atKey, 1, 1000, i64arg(-1 << 63), atOut, 64, atOutLen}, fmt.Sprintf(`lock "k": wait %d ms out of range`, int64(-1<<63))},
		{abi.FnTimer, []uint64{atKey, 1, i64arg(-1 << 63), 0, atValue, 1}, fmt.Sprintf(`timer "k": delay %d ms out of range`, int64(-1<<63))},
		{abi.FnTimer, []uint64{atKey, 1, i64arg(maxMillis + 1), 0, atValue, 1}, fmt.Sprintf(`timer "k": delay %d ms out of range`, maxMillis+1)},
		{abi.FnTimer, []uint64{atKey, 1, 0, i64arg(-maxMillis - 1), atValue, 1}, fmt.Sprintf(`timer "k": every %d ms out of range`, -maxMillis-1)},
	}
	for _, tc := range cases {
		t.Run(tc.msg, func(t *testing.T) {
			c := newHandABI(t)
			c.write(atKey, []byte("k"))
			c.expect(tc.fn, c.call(tc.fn, tc.args...), abi.StatusInvalid)
			if got := c.lastError(); got != tc.msg {
				t.Errorf("last_error %q, want %q", got, tc.msg)
			}
			notCalled(tc.fn)(t, c.h)
		})
	}
}

// TestMisuseTraps: every pointer range outside memory traps the call with
// an error naming function and argument, before the Host is asked.
func TestMisuseTraps(t *testing.T) {
	const far = 0xffff0000
	base := map[string][]uint64{
		abi.FnGet:       {atKey, 1, atOut, 64, atOutLen},
		abi.FnSet:       {atKey, 1, atValue, 1, 0, 0, atFence, 0, atOut, 64, atOutLen},
		abi.FnDel:       {atKey, 1, atFence, 0},
		abi.FnVDel:      {atKey, 1, atValue, 1, atFence, 0},
		abi.FnWatch:     {atKey, 1, 0},
		abi.FnUnwatch:   {atKey, 1},
		abi.FnLock:      {atKey, 1, 1000, 0, atOut, 64, atOutLen},
		abi.FnUnlock:    {atKey, 1},
		abi.FnLog:       {0, atKey, 1},
		abi.FnResult:    {atOut, 64, atOutLen},
		abi.FnLastError: {atOut, 64, atOutLen},
		abi.FnTimer:     {atKey, 1, 1000, 0, atValue, 1},
		abi.FnCancel:    {atKey, 1},
		abi.FnNow:       {atOut},
	}
	cases := []struct {
		fn    string
		index int
		value uint64
		arg   string
	}{
		{abi.FnGet, 0, far, "key"},
		{abi.FnGet, 1, memBytes, "key"}, // length runs past the end
		{abi.FnGet, 2, memBytes - 10, "out buffer"},
		{abi.FnGet, 4, memBytes - 3, "out_len"},
		{abi.FnSet, 0, far, "key"},
		{abi.FnSet, 2, far, "value"},
		{abi.FnSet, 6, memBytes + 1, "fence"}, // empty, but starts past the end
		{abi.FnSet, 8, far, "out buffer"},
		{abi.FnSet, 10, far, "out_len"},
		{abi.FnDel, 0, far, "key"},
		{abi.FnDel, 2, far, "fence"},
		{abi.FnVDel, 0, far, "key"},
		{abi.FnVDel, 2, far, "value"},
		{abi.FnVDel, 4, far, "fence"},
		{abi.FnWatch, 0, far, "key"},
		{abi.FnUnwatch, 1, memBytes, "key"},
		{abi.FnLock, 0, far, "name"},
		{abi.FnLock, 4, far, "out buffer"},
		{abi.FnLock, 6, far, "out_len"},
		{abi.FnUnlock, 0, far, "name"},
		{abi.FnLog, 1, far, "message"},
		{abi.FnResult, 0, far, "out buffer"},
		{abi.FnResult, 2, far, "out_len"},
		{abi.FnLastError, 0, far, "out buffer"},
		{abi.FnLastError, 2, memBytes - 1, "out_len"},
		{abi.FnTimer, 0, far, "name"},
		{abi.FnTimer, 1, memBytes, "name"},
		{abi.FnTimer, 4, far, "payload"},
		{abi.FnTimer, 5, 0xffffffff, "payload"},   // a 4 GiB payload: refused before any copy
		{abi.FnTimer, 4, memBytes + 1, "payload"}, // empty, but starts past the end
		{abi.FnCancel, 0, far, "name"},
		{abi.FnCancel, 1, memBytes, "name"},
		{abi.FnNow, 0, far, "out"},
		{abi.FnNow, 0, memBytes - 7, "out"}, // 7 of the 8 bytes inside
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s %s", tc.fn, tc.arg), func(t *testing.T) {
			c := newHandABI(t)
			c.write(atKey, []byte("k"))
			args := append([]uint64(nil), base[tc.fn]...)
			args[tc.index] = tc.value
			_, err := c.try(tc.fn, args...)
			var me *misuseError
			if !errors.As(err, &me) {
				t.Fatalf("call: %v; want a trap with *misuseError", err)
			}
			want := fmt.Sprintf("ssrun.%s: %s [", tc.fn, tc.arg)
			if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "is outside guest memory (65536 bytes)") {
				t.Fatalf("error %q, want %q... outside guest memory (65536 bytes)", firstLine(err.Error()), want)
			}
			notCalled(tc.fn)(t, c.h)
			// Edges of memory are fine.
			c.expect("watch at the end", c.call(abi.FnWatch, memBytes, 0, 0), abi.StatusInvalid) // empty key, not a trap
			c.write(memBytes-1, []byte("z"))
			c.expect("unwatch last byte", c.call(abi.FnUnwatch, memBytes-1, 1), abi.StatusNotFound)
		})
	}
}

// TestHandleHandGuest: the event path with a hand-made guest: the record
// written, ssrun_on_event's result, broken ssrun_alloc, traps, timeouts
// and a memory limit reached.
func TestHandleHandGuest(t *testing.T) {
	r := sharedRuntime(t)
	ev := abi.Event{Key: "k\x00", Op: abi.OpSet, Value: []byte("\xffv"), Version: "1:2:x", Resync: true}
	longEv := abi.Event{Key: strings.Repeat("k", 200), Op: abi.OpDelete}
	badGet := ops(i32c(-16), i32c(64), i32c(atOut), i32c(64), i32c(atOutLen), call(importIndex(abi.FnGet)), opDrop)
	opGrowOne := []byte{0x41, 0x01, 0x40, 0x00} // i32.const 1; memory.grow 0
	cases := []struct {
		name     string
		module   wModule
		lim      abi.Limits
		ev       abi.Event
		is       error
		msg      string
		replaced bool
	}{
		{name: "ok", module: handGuest(nil), ev: ev},
		{name: "status", module: handGuest(i32c(int32(abi.StatusDenied))), ev: ev, is: abi.ErrCrashed,
			msg: "handler failed: status DENIED (the rule's log has its message)"},
		{name: "negative", module: handGuest(i32c(-7)), ev: ev, is: abi.ErrCrashed,
			msg: "handler failed: returned -7 (the rule's log has its message)"},
		{name: "unknown status", module: handGuest(i32c(99)), ev: ev, is: abi.ErrCrashed,
			msg: "handler failed: returned 99 (the rule's log has its message)"},
		{name: "alloc returns 0", module: handGuest(nil).withFunc(wFunc{export: abi.ExportAlloc, params: sig(i32), results: sig(i32), body: i32c(0)}),
			ev: ev, is: abi.ErrCrashed, replaced: true,
			msg: fmt.Sprintf("handler failed: ssrun_alloc(%d) returned 0x0, not a buffer in guest memory", abi.EventSize(ev))},
		{name: "alloc out of memory", module: handGuest(nil).withFunc(wFunc{export: abi.ExportAlloc, params: sig(i32), results: sig(i32), body: i32c(memBytes - 4)}),
			ev: ev, is: abi.ErrCrashed, replaced: true,
			msg: fmt.Sprintf("handler failed: ssrun_alloc(%d) returned 0xfffc, not a buffer in guest memory", abi.EventSize(ev))},
		{name: "bad pointer", module: handGuest(ops(localGet(1), i32c(100), []byte{0x4b}, opIf, badGet, opEnd, i32c(0))),
			ev: longEv, is: abi.ErrCrashed, replaced: true,
			msg: "handler failed: ssrun.get: key [4294967280, 4294967280+64) is outside guest memory (65536 bytes) (recovered by wazero)"},
		{name: "trap", module: handGuest(ops(opUnreachable, i32c(0))), ev: ev, is: abi.ErrCrashed, replaced: true,
			msg: "handler failed: wasm error: unreachable"},
		{name: "spin", module: handGuest(ops(opSpin, i32c(0))), lim: abi.Limits{CallTimeout: 50 * time.Millisecond}, ev: ev,
			is: abi.ErrTimeout, replaced: true, msg: "handler exceeded its deadline (limit 50ms)"},
		{name: "memory at limit", module: handGuest(ops(opGrowOne, opDrop, opUnreachable, i32c(0))), lim: abi.Limits{MemoryBytes: 2 * pageSize},
			ev: ev, is: abi.ErrMemory, replaced: true, msg: "handler exceeded its memory limit: wasm error: unreachable"},
		{name: "memory below limit", module: handGuest(ops(opGrowOne, opDrop, opUnreachable, i32c(0))), lim: abi.Limits{MemoryBytes: 3 * pageSize},
			ev: ev, is: abi.ErrCrashed, replaced: true, msg: "handler failed: wasm error: unreachable"},
		{name: "now bad pointer", module: handGuest(ops(i32c(-4), call(importIndex(abi.FnNow)), opDrop, i32c(0))), ev: ev,
			is: abi.ErrCrashed, replaced: true,
			msg: "handler failed: ssrun.now: out [4294967292, 4294967292+8) is outside guest memory (65536 bytes) (recovered by wazero)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			s := start(t, compile(t, r, "hand.wasm", tc.module.bytes()), h, tc.lim)
			in := s.in
			err := s.Handle(context.Background(), tc.ev)
			if tc.is == nil {
				if err != nil {
					t.Fatalf("Handle: %v", err)
				}
				if got := (&handABI{t: t, s: s}).read(handAllocAt, uint32(abi.EventSize(tc.ev))); !bytes.Equal(got, abi.AppendEvent(nil, tc.ev)) {
					t.Fatalf("event record in guest memory %q, want %q", got, abi.AppendEvent(nil, tc.ev))
				}
				return
			}
			if !errors.Is(err, tc.is) {
				t.Fatalf("Handle: %v; want %v", err, tc.is)
			}
			if want := fmt.Sprintf("hand.wasm: %s %q: %s", tc.ev.Op, tc.ev.Key, tc.msg); err.Error() != want {
				t.Fatalf("error\n got %s\nwant %s", err, want)
			}
			if replaced := s.in != in; replaced != tc.replaced {
				t.Fatalf("instance replaced before the next event = %t, want %t", replaced, tc.replaced)
			}
		})
	}
	t.Run("recovers after a bad pointer", func(t *testing.T) {
		s := start(t, compile(t, r, "hand.wasm", cases[6].module.bytes()), abitest.New(), abi.Limits{})
		if err := s.Handle(context.Background(), longEv); !errors.Is(err, abi.ErrCrashed) {
			t.Fatalf("Handle: %v", err)
		}
		if err := s.Handle(context.Background(), ev); err != nil {
			t.Fatalf("next Handle: %v", err)
		}
		if s.in == nil {
			t.Fatal("no instance after a successful event")
		}
	})
}

// TestStartLimits: memory limits that cannot work fail Start clearly.
func TestStartLimits(t *testing.T) {
	r := sharedRuntime(t)
	p := compile(t, r, "hand.wasm", handGuest(nil).bytes())
	if _, err := p.Start(context.Background(), abitest.New(), abi.Limits{MemoryBytes: 1000}); err == nil ||
		err.Error() != "hand.wasm: start: memory limit 1000 bytes is below one 64 KiB page" {
		t.Fatalf("Start below one page: %v", err)
	}
	big := handGuest(nil)
	big.memPages = 20
	p = compile(t, r, "big.wasm", big.bytes())
	_, err := p.Start(context.Background(), abitest.New(), abi.Limits{MemoryBytes: 16 * pageSize})
	if err == nil || !strings.HasPrefix(err.Error(), "big.wasm: start with memory limit 1048576 bytes: ") {
		t.Fatalf("Start below the module's minimum memory: %v", err)
	}
	s := start(t, p, abitest.New(), abi.Limits{MemoryBytes: 20 * pageSize})
	if got := s.in.mod.Memory().Size(); got != 20*pageSize {
		t.Fatalf("memory %d bytes", got)
	}
	// wasm32's whole 4 GiB, or more, gets a page less: wazero's Size of a
	// 4 GiB memory is 0 (a uint32 of bytes).
	for _, b := range []int64{4 << 30, 1 << 40} {
		if got, err := memoryPages(b); err != nil || got != 1<<16-1 {
			t.Errorf("memoryPages(%d) = %d, %v; want %d pages", b, got, err, 1<<16-1)
		}
	}
}
