package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// TestTimerHostFunctions drives timer, cancel and now with exact pointers,
// lengths and durations (abi/doc.go, revision 2).
func TestTimerHostFunctions(t *testing.T) {
	const now = 1732000000000
	t.Run("timer arguments reach the Host", func(t *testing.T) {
		c := newHandABI(t)
		c.h.SetNow(now)
		c.write(atKey, []byte("t\x00\xff"))
		c.write(atValue, []byte("\x00pay\xff"))
		c.expect("timer", c.call(abi.FnTimer, atKey, 3, i64arg(1500), i64arg(30_000), atValue, 5), abi.StatusOK)
		got := c.h.Timers()["t\x00\xff"]
		if got.Deadline != now+1500 || got.Every != 30*time.Second || string(got.Payload) != "\x00pay\xff" {
			t.Fatalf("armed %+v", got)
		}
		// The Host keeps a copy: the guest reusing its memory changes nothing.
		c.write(atValue, []byte("XXXXX"))
		if got := c.h.Timers()["t\x00\xff"]; string(got.Payload) != "\x00pay\xff" {
			t.Fatalf("payload aliases guest memory: %q", got.Payload)
		}
		// An empty payload is an empty, not a nil, payload; even at the end of memory.
		c.expect("timer empty payload", c.call(abi.FnTimer, atKey, 1, 0, 0, memBytes, 0), abi.StatusOK)
		if got := c.h.Timers()["t"]; got.Payload == nil || len(got.Payload) != 0 || got.Deadline != now {
			t.Fatalf("armed %+v, want an empty payload due now", got)
		}
	})
	t.Run("negative durations are the Host's INVALID", func(t *testing.T) {
		for _, args := range [][2]int64{{-1, 0}, {0, -1}, {-maxMillis, 0}} {
			c := newHandABI(t)
			c.write(atKey, []byte("t"))
			c.expect("timer", c.call(abi.FnTimer, atKey, 1, i64arg(args[0]), i64arg(args[1]), atValue, 0), abi.StatusInvalid)
			if got := c.lastError(); got != `timer "t": negative delay or period` {
				t.Errorf("delay %d every %d: last_error %q", args[0], args[1], got)
			}
			if call, _ := c.h.LastCall(abi.FnTimer); call.Delay != time.Duration(args[0])*time.Millisecond || call.Timer.Every != time.Duration(args[1])*time.Millisecond {
				t.Errorf("delay %d every %d reached the Host as %v, %v", args[0], args[1], call.Delay, call.Timer.Every)
			}
			if len(c.h.Timers()) != 0 {
				t.Errorf("armed %v", c.h.Timers())
			}
		}
	})
	t.Run("a payload as large as memory reaches the Host, which refuses it", func(t *testing.T) {
		c := newHandABI(t)
		c.write(atKey, []byte("t"))
		c.h.Fail(abi.FnTimer, abi.Errorf(abi.StatusTooLarge, "timer \"t\": payload too large"))
		c.expect("timer", c.call(abi.FnTimer, atKey, 1, 0, 0, 0, memBytes), abi.StatusTooLarge)
		if call, _ := c.h.LastCall(abi.FnTimer); len(call.Timer.Payload) != memBytes {
			t.Fatalf("payload of %d bytes reached the Host, want %d", len(call.Timer.Payload), memBytes)
		}
		if got := c.lastError(); got != `timer "t": payload too large` {
			t.Fatalf("last_error %q", got)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		c := newHandABI(t)
		c.write(atKey, []byte("t\x00"))
		c.expect("cancel unarmed", c.call(abi.FnCancel, atKey, 2), abi.StatusNotFound)
		if got := c.lastError(); got != `cancel "t\x00": no such timer` {
			t.Fatalf("last_error %q", got)
		}
		_ = c.h.Timer(context.Background(), "t\x00", time.Hour, abi.TimerOptions{})
		c.expect("cancel", c.call(abi.FnCancel, atKey, 2), abi.StatusOK)
		if len(c.h.Timers()) != 0 {
			t.Fatalf("still armed: %v", c.h.Timers())
		}
	})
	t.Run("now", func(t *testing.T) {
		c := newHandABI(t)
		c.h.SetNow(now + 123)
		c.fill()
		c.expect("now", c.call(abi.FnNow, atOut), abi.StatusOK)
		if got := binary.LittleEndian.Uint64(c.read(atOut, 8)); got != now+123 {
			t.Fatalf("now wrote %d, want %d", got, now+123)
		}
		if got := c.read(atOut+8, 8); !bytes.Equal(got, bytes.Repeat([]byte{0xaa}, 8)) {
			t.Fatalf("now wrote past its 8 bytes: %x", got)
		}
		if c.outLen() != 0xdeadbeef {
			t.Fatal("now wrote out_len")
		}
		c.expect("now in the last 8 bytes", c.call(abi.FnNow, memBytes-8), abi.StatusOK)
		// now is a verb call: the kept record of the verb before is gone.
		c.write(atKey, []byte("k"))
		c.h.Put("k", []byte("v"))
		c.expect("get", c.call(abi.FnGet, atKey, 1, atOut, 0x1000, atOutLen), abi.StatusOK)
		c.expect("now", c.call(abi.FnNow, atOut), abi.StatusOK)
		c.expect("result after now", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusInvalid)
	})
}

// TestRevision1Modules: modules built before revision 2 import none of
// timer, cancel and now (nor revision 3's functions), and load and run
// unchanged; the Go SDK imports them only into rules that call them.
func TestRevision1Modules(t *testing.T) {
	// The host functions revisions 2 and 3 added.
	later := []string{abi.FnTimer, abi.FnCancel, abi.FnNow, abi.FnKeys, abi.FnWatchPattern, abi.FnUnwatchPattern}
	r := sharedRuntime(t)

	// A hand-made module importing exactly the eleven revision-1 host
	// functions, as a module built for revision 1 does.
	m := wModule{memPages: 1, memExport: "memory"}
	var rev1 []string
	for _, name := range abi.HostFunctions() {
		if !slices.Contains(later, name) {
			rev1 = append(rev1, name)
		}
	}
	if len(rev1) != 11 {
		t.Fatalf("revision 1 has %d host functions, want 11", len(rev1))
	}
	for _, name := range rev1 {
		m.imports = append(m.imports, wImport{abi.ImportModule, name, handParams[name], sig(i32)})
	}
	// ssrun_on_event logs its event record through the revision-1 log.
	logIndex := slices.Index(rev1, abi.FnLog)
	m.funcs = []wFunc{
		{export: abi.ExportABIVersion, results: sig(i32), body: i32c(abi.Version)},
		{export: abi.ExportAlloc, params: sig(i32), results: sig(i32), body: i32c(handAllocAt)},
		{export: abi.ExportOnEvent, params: sig(i32, i32), results: sig(i32),
			body: ops(i32c(abi.LevelInfo), localGet(0), localGet(1), call(logIndex))},
	}
	h := abitest.New()
	s := start(t, compile(t, r, "revision1.wasm", m.bytes()), h, abi.Limits{})
	ev := abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v"), Version: "1:0:n"}
	if err := s.Handle(context.Background(), ev); err != nil {
		t.Fatalf("Handle: %v", err)
	}
	if logs := h.Logs(); len(logs) != 1 || logs[0].Msg != string(abi.AppendEvent(nil, ev)) {
		t.Fatalf("logs %q, want the event record", logs)
	}

	// Go rules: the linker keeps an import only when the rule calls it.
	e, err := r.engine(context.Background(), abi.DefaultMemoryBytes/pageSize)
	if err != nil {
		t.Fatal(err)
	}
	imports := func(name string) []string {
		cm, err := e.rt.CompileModule(context.Background(), guest(t, name))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cm.Close(context.Background()) }()
		var out []string
		for _, def := range cm.ImportedFunctions() {
			if mod, fn, _ := def.Import(); mod == abi.ImportModule && slices.Contains(later, fn) {
				out = append(out, fn)
			}
		}
		slices.Sort(out)
		return out
	}
	if got := imports("sleeper"); len(got) != 0 {
		t.Errorf("the sleeper guest (no timers, no patterns) imports %v", got)
	}
	want := slices.Sorted(slices.Values(later))
	if got := imports("rule"); !slices.Equal(got, want) {
		t.Errorf("the rule guest (calls timer, cancel, now and the pattern verbs) imports %v, want %v", got, want)
	}
}
