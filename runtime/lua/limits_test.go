package lua

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// crash282 is gopher-lua issue #282: the registry overflows and the error
// handler's traceback indexes the call stack at -1, a Go panic that escapes
// PCall.
const crash282 = `local function g(...) return g(1, ...) end g()`

func TestCrash282RebuildsState(t *testing.T) {
	// A small registry makes the overflow come in milliseconds instead of
	// seconds; the panic is gopher-lua's own, not a simulation.
	rt := New(Config{RegistrySize: 256, RegistryMaxSize: 4096})
	h := abitest.New()
	p := compileRule(t, rt, "crash.lua", `
local ss = require("ssrun")
ss.watch("k")
local n = 0
function on_event(ev)
  n = n + 1
  if ev.value == "crash" then
    `+crash282+`
  end
  ss.log("info", ev.value .. " n=" .. n)
end`)
	s, err := p.Start(context.Background(), h, abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	ctx := context.Background()
	if err := s.Handle(ctx, setEvent("k", "a")); err != nil {
		t.Fatal(err)
	}
	err = s.Handle(ctx, setEvent("k", "crash"))
	if e := wantErr(t, err, abi.ErrCrashed, 0); !strings.Contains(e.Msg, "index out of range") || !strings.Contains(e.Msg, "panicked") {
		t.Fatalf("error %q is not gopher-lua's #282 panic", err)
	}
	if err := s.Handle(ctx, setEvent("k", "b")); err != nil {
		t.Fatalf("event after the crash: %v", err)
	}
	// The state was rebuilt: the top-level code ran again (n restarted and
	// the watch was declared again).
	if got := strings.Join(logs(h), " "); got != "a n=1 b n=1" {
		t.Errorf("logs %q", got)
	}
	if n := h.Calls(abi.FnWatch); n != 2 {
		t.Errorf("watch called %d times, want 2 (load and rebuild)", n)
	}

	// The same panic while loading fails Start.
	_, err = compileRule(t, rt, "crash_at_load.lua", crash282+"\nfunction on_event() end").Start(ctx, h, abi.Limits{})
	if e := wantErr(t, err, abi.ErrCrashed, 0); e.Call != "load" || !strings.Contains(e.Msg, "index out of range") {
		t.Errorf("start: %v", err)
	}
}

func TestCrash282DefaultOptions(t *testing.T) {
	// With the default registry, #282 takes seconds to overflow: the
	// deadline usually stops it first. Either way the rule keeps working.
	h := abitest.New()
	s := startRule(t, `
function on_event(ev)
  if ev.value == "crash" then `+crash282+` end
  print("ok")
end`, h, abi.Limits{CallTimeout: 100 * time.Millisecond})
	err := s.Handle(context.Background(), setEvent("k", "crash"))
	if !errors.Is(err, abi.ErrTimeout) && !errors.Is(err, abi.ErrCrashed) {
		t.Fatalf("crash: %v", err)
	}
	if err := s.Handle(context.Background(), setEvent("k", "b")); err != nil {
		t.Fatalf("event after the crash: %v", err)
	}
}

func TestTimeout(t *testing.T) {
	h := abitest.New()
	s := startRule(t, `
local ss = require("ssrun")
local n = 0
function on_event(ev)
  n = n + 1
  if ev.value == "spin" then
    while true do end
  elseif ev.value == "pcall" then
    while true do pcall(function() while true do end end) end
  elseif ev.value == "recurse" then
    local function f() return pcall(f) end
    while true do f() end
  end
  ss.log("info", ev.value .. " n=" .. n)
end`, h, abi.Limits{CallTimeout: 50 * time.Millisecond})
	ctx := context.Background()
	for _, tc := range []struct {
		value string
		line  int
	}{{"spin", 7}, {"pcall", 9}, {"recurse", 0}} {
		err := s.Handle(ctx, setEvent("k", tc.value))
		if e := wantErr(t, err, abi.ErrTimeout, tc.line); !strings.Contains(e.Msg, "deadline") {
			t.Errorf("%s: %v", tc.value, err)
		}
		if err := s.Handle(ctx, setEvent("k", "ok")); err != nil {
			t.Fatalf("event after the %s timeout: %v", tc.value, err)
		}
	}
	if got := strings.Join(logs(h), " "); got != "ok n=2 ok n=4 ok n=6" {
		t.Errorf("logs %q: the state should survive timeouts", got)
	}

	_, err := compileRule(t, New(Config{}), "spin.lua", "while true do end").Start(ctx, h, abi.Limits{CallTimeout: 20 * time.Millisecond})
	wantErr(t, err, abi.ErrTimeout, 1)
}

// blockingHost blocks in Get until the call's context ends.
type blockingHost struct {
	*abitest.Host
	deadline chan bool
}

func (h blockingHost) Get(ctx context.Context, key string) (abi.Value, error) {
	_, ok := ctx.Deadline()
	h.deadline <- ok
	<-ctx.Done()
	return abi.Value{}, ctx.Err()
}

func TestDeadlineReachesHost(t *testing.T) {
	h := blockingHost{abitest.New(), make(chan bool, 1)}
	s := startRule(t, `
local ss = require("ssrun")
function on_event(ev)
  local v, msg, code = ss.get("k")
  ss.log("info", tostring(v) .. " " .. code)
end`, h, abi.Limits{CallTimeout: 20 * time.Millisecond})
	err := s.Handle(context.Background(), setEvent("k", "v"))
	wantErr(t, err, abi.ErrTimeout, 0)
	if !<-h.deadline {
		t.Error("the host call had no deadline")
	}
	// Get returned TIMEOUT to the rule; its next instruction ended the call.
	if l := logs(h.Host); len(l) != 0 {
		t.Errorf("the rule ran on after its deadline: %q", l)
	}
}

func TestMemoryLimit(t *testing.T) {
	const limit = 8 << 20
	for _, tc := range []struct {
		name, code string
		timeoutOK  bool // the table loop may hit the deadline first
	}{
		{"string.rep", `local s = string.rep("x", 1e9)`, false},
		{"string.rep under pcall", `pcall(string.rep, "x", 1e9) while true do end`, false},
		{"table.concat", `local t, s = {}, string.rep("x", 1e6) for i = 1, 100 do t[i] = s end local r = table.concat(t)`, false},
		{"many reps", `local t = {} for i = 1, 1e6 do t[i] = string.rep("x", 1e6) end`, false},
		{"doubling", `local s = "x" while true do s = s .. s end`, false},
		{"table growth", `local t, i = {}, 0 while true do i = i + 1 t[i] = {i} end`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			s := startRule(t, `
local ss = require("ssrun")
ss.watch("k")
function on_event(ev)
  if ev.value == "bomb" then
    `+tc.code+`
  end
end`, h, abi.Limits{MemoryBytes: limit, CallTimeout: 20 * time.Second})

			// Another rule keeps working meanwhile, and is not blamed.
			other := startRule(t, `n = 0 function on_event(ev) n = n + 1 end`, abitest.New(), abi.Limits{})
			stop, running := make(chan struct{}), make(chan struct{})
			var handled atomic.Int64
			var wg sync.WaitGroup
			var otherErr error
			wg.Go(func() {
				for {
					if err := other.Handle(context.Background(), setEvent("k", "v")); err != nil {
						otherErr = err
						return
					}
					if handled.Add(1) == 1 {
						close(running)
					}
					select {
					case <-stop:
						return
					default:
					}
				}
			})
			<-running

			err := s.Handle(context.Background(), setEvent("k", "bomb"))
			close(stop)
			wg.Wait()
			t.Logf("%v; the other rule handled %d events meanwhile", err, handled.Load())
			if !errors.Is(err, abi.ErrMemory) && !(tc.timeoutOK && errors.Is(err, abi.ErrTimeout)) {
				t.Fatalf("bomb: %v, want ErrMemory", err)
			}
			wantErr(t, err, err.(*Error).Err, 6)
			if otherErr != nil {
				t.Fatalf("the other rule failed: %v", otherErr)
			}
			if n := other.(*script).st.L.GetGlobal("n"); n != glua.LNumber(handled.Load()) {
				t.Errorf("the other rule counted %v events, handled %d: its state was not kept", n, handled.Load())
			}
			if err := s.Handle(context.Background(), setEvent("k", "ok")); err != nil {
				t.Fatalf("event after the bomb: %v", err)
			}
			if errors.Is(err, abi.ErrMemory) && h.Calls(abi.FnWatch) != 2 {
				t.Errorf("watch called %d times, want 2: the state should have been rebuilt", h.Calls(abi.FnWatch))
			}
		})
	}
}

func TestBuiltinCaps(t *testing.T) {
	for _, tc := range []struct {
		code, msg string
		sentinel  error
	}{
		{`string.format("%100d", 1)`, "width too long", abi.ErrCrashed},
		{`string.format("%5.100f", 1)`, "precision too long", abi.ErrCrashed},
		{`string.format(string.rep("%[1]999999d", 1000), 1)`, "invalid option '%['", abi.ErrCrashed}, // Go fmt syntax
		{`string.rep("ab", 1e6)`, "string.rep: 1000000 x 2 bytes exceed the rule's memory limit of 1048576 bytes", abi.ErrMemory},
		{`table.concat({string.rep("x", 1000)}, string.rep("y", 1000), 1, 1)`, "", nil},
		{`local s, t = string.rep("x", 1000), {} for i = 1, 2000 do t[i] = s end table.concat(t, ",")`, "table.concat: 2001999 bytes exceed", abi.ErrMemory},
		{`assert(string.format("%5.2f|%-3d|%%|%02x", 3.14159, 7, 255) == " 3.14|7  |%|ff")`, "", nil},
		{`assert(string.rep("ab", 3) == "ababab" and string.rep("x", 0) == "" and string.rep("x", -1) == "")`, "", nil},
		{`assert(table.concat({1, "a", 2.5}, "-") == "1-a-2.5" and table.concat({}, "x") == "")`, "", nil},
	} {
		h := abitest.New()
		_, err := compileRule(t, New(Config{}), "cap.lua", tc.code+"\nfunction on_event() end").Start(context.Background(), h, abi.Limits{MemoryBytes: 1 << 20})
		if tc.sentinel == nil {
			if err != nil {
				t.Errorf("%s: %v", tc.code, err)
			}
			continue
		}
		if e := wantErr(t, err, tc.sentinel, 1); !strings.Contains(e.Msg, tc.msg) {
			t.Errorf("%s: %q, want %q", tc.code, e.Msg, tc.msg)
		}
	}
}

// A long call that only makes garbage is not blamed for memory, even with a
// small limit and the rest of the process churning garbage meanwhile: the
// account counts memory the rule keeps reachable, not what it allocated
// (regression: the old process-wide guard counted unswept garbage, and
// under load killed long calls of well-behaved rules as memory bombs).
func TestMemoryGuardIgnoresGarbage(t *testing.T) {
	const limit = 32 << 20
	h := abitest.New()
	s := startRule(t, `
function on_event(ev)
  local n = 0
  for i = 1, 30000 do
    local s = string.rep("x", 1000) .. i   -- ~30 MB of short-lived strings
    n = n + #s
  end
end`, h, abi.Limits{MemoryBytes: limit, CallTimeout: 60 * time.Second})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var sink atomic.Int64
	wg.Go(func() { // another part of the process allocating garbage fast
		for {
			select {
			case <-stop:
				return
			default:
			}
			b := make([]byte, 1<<20)
			sink.Add(int64(len(b)))
		}
	})
	defer func() { close(stop); wg.Wait() }()
	for i := 0; i < 3; i++ {
		if err := s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("x")}); err != nil {
			t.Fatalf("call %d: %v (the process allocated %d MiB of garbage meanwhile)", i, err, sink.Load()>>20)
		}
	}
}
