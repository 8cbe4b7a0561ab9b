package lua

import (
	"context"
	"fmt"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// allocated returns the bytes the process has allocated on the heap since
// it started (runtime/metrics, cumulative): the difference across a call is
// an upper bound of what the call could have held at once, garbage
// included, whatever the timing of collections.
func allocated() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// chain returns n operands joined by "..".
func chain(operand string, n int) string {
	return strings.TrimSuffix(strings.Repeat(operand+" .. ", n), " .. ")
}

// TestOneExpressionCannotAllocatePastTheLimit is issue 14, point 3: one
// expression built 20 x 60 MiB (1.29 GB resident) because only rep,
// format widths and table.concat were capped. Every builder now sizes its
// result before building it and fails the call with ErrMemory, at the
// expression's line, when the rule would go past its limit; the process
// allocates nothing near the result's size.
func TestOneExpressionCannotAllocatePastTheLimit(t *testing.T) {
	const (
		limit = 64 << 20
		big   = 60 << 20 // one operand: under the limit on its own
		small = 6 << 20
		// bound is what the call may allocate in all: the operand it builds
		// (string.rep), plus the state's own churn.
		bound = big + 16<<20
	)
	groups := make([]string, 10) // 200 operands: a flat chain compiles up to 197
	for i := range groups {
		groups[i] = "(" + chain("a", 20) + ")"
	}
	for _, tc := range []struct {
		name, expr string
		size       int
	}{
		{"concat of 20 operands", chain("a", 20), big},
		{"concat of 200 operands", strings.Join(groups, " .. "), small},
		{"concat of numbers and strings", chain("a .. 1.5", 20), big},
		{"string.format with ten %s", `string.format(string.rep("%s", 10), ` + strings.Repeat("a, ", 9) + `a)`, big},
		{"string.format %q", `string.format("%q%q", a, a)`, big},
		{"table constructor", "{" + strings.Repeat("a .. 'x', ", 20) + "}", big},
		{"gsub", `a:gsub("x", "yy")`, big},
		{"upper", `{a:upper(), a:upper()}`, big},
		{"reverse", `{a:reverse(), a:reverse()}`, big},
		{"rep", `a:rep(2)`, big},
		{"table.concat", `table.concat({a, a})`, big},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			s := startRule(t, `
function on_event(ev)
  local a = string.rep("x", `+fmt.Sprint(tc.size)+`)
  local r = `+tc.expr+`
  print("built", type(r))
end`, h, abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
			before := allocated()
			err := s.Handle(context.Background(), setEvent("k", "v"))
			grew := allocated() - before
			t.Logf("%v; the process allocated %d MiB during the call", err, grew>>20)
			e := wantErr(t, err, abi.ErrMemory, 4)
			if !strings.Contains(e.Msg, "memory limit") {
				t.Errorf("message %q does not name the memory limit", e.Msg)
			}
			if grew > bound {
				t.Errorf("the call allocated %d MiB, more than the operand and the state's churn (%d MiB): the result was built", grew>>20, bound>>20)
			}
			if len(logs(h)) != 0 {
				t.Errorf("the rule went on: %q", logs(h))
			}
		})
	}
}

// blockingLockHost blocks in Lock until released (or the call's context
// ends), the way a lock wait in a real host does.
type blockingLockHost struct {
	*abitest.Host
	entered chan struct{}
	release chan struct{}
}

func (h *blockingLockHost) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	close(h.entered)
	select {
	case <-h.release:
		return h.Host.Lock(ctx, name, ttl, opts)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// TestInnocentRuleNotBlamed is issue 14, point 4: the memory guard read
// process-wide figures and stopped the longest-running call, here a rule
// blocked in ss.lock, while another rule allocated. Only the rule whose own
// state holds the memory is stopped.
func TestInnocentRuleNotBlamed(t *testing.T) {
	const limit = 8 << 20
	for _, tc := range []struct{ name, bomb string }{
		{"table growth", `local t, i = {}, 0 while true do i = i + 1 t[i] = {i} end`},
		{"string doubling", `local s = "x" while true do s = s .. s end`},
		{"strings kept in a table", `local t = {} for i = 1, 1e9 do t[i] = string.rep("x", 1000) .. i end`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			host := &blockingLockHost{Host: abitest.New(), entered: make(chan struct{}), release: make(chan struct{})}
			innocent := startRule(t, `
local ss = require("ssrun")
function on_event(ev)
  local token = ss.lock("L", 1000)
  ss.info("locked " .. tostring(token))
end`, host, abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
			bomb := startRule(t, `
function on_event(ev)
  `+tc.bomb+`
end`, abitest.New(), abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})

			var wg sync.WaitGroup
			var innocentErr error
			wg.Go(func() { innocentErr = innocent.Handle(context.Background(), setEvent("k", "v")) })
			<-host.entered // the innocent call waits in ss.lock from now on

			err := bomb.Handle(context.Background(), setEvent("k", "bomb"))
			close(host.release)
			wg.Wait()
			wantErr(t, err, abi.ErrMemory, 3)
			if innocentErr != nil {
				t.Fatalf("the innocent rule, blocked in ss.lock, was stopped: %v", innocentErr)
			}
			if l := logs(host.Host); len(l) != 1 || !strings.HasPrefix(l[0], "locked 0") {
				t.Errorf("innocent rule logs %q", l)
			}
		})
	}
}

// A rule's state that grows past the limit across calls is stopped too,
// and only at the call that grows it.
func TestStateGrowthAcrossCalls(t *testing.T) {
	const limit = 8 << 20
	h := abitest.New()
	s := startRule(t, `
keep = {}
function on_event(ev)
  keep[#keep + 1] = string.rep(ev.value, 1048576)
  print(#keep)
end`, h, abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
	var err error
	calls := 0
	for ; calls < 20 && err == nil; calls++ {
		err = s.Handle(context.Background(), setEvent("k", string(rune('a'+calls))))
	}
	wantErr(t, err, abi.ErrMemory, 4)
	if calls < 7 || calls > 9 {
		t.Errorf("stopped at call %d, want about 8 (8 MiB in 1 MiB strings)", calls)
	}
	// The state was discarded and rebuilt: the rule starts afresh.
	if err := s.Handle(context.Background(), setEvent("k", "z")); err != nil {
		t.Fatal(err)
	}
	if l := logs(h); l[len(l)-1] != "1" {
		t.Errorf("logs %q: the state should have been rebuilt", l)
	}
}

// TestFarIndexIsBounded: one store to a far integer key made gopher-lua fill
// a table's array with nils up to it, inside one instruction: t[6e7] = 1
// allocated 1 GiB (and 5 GiB in all as the array grew).
func TestFarIndexIsBounded(t *testing.T) {
	const limit = 256 << 20
	h := abitest.New()
	s := startRule(t, `
function on_event(ev)
  local t = {}
  t[6e7] = 1
  t[maxArray] = 2
  print(t[6e7] + t[maxArray], #t)
end`, h, abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
	s.(*script).st.L.SetGlobal("maxArray", glua.LNumber(maxArrayIndex-1))
	before := allocated()
	if err := s.Handle(context.Background(), setEvent("k", "v")); err != nil {
		t.Fatal(err)
	}
	grew := allocated() - before
	t.Logf("the call allocated %d MiB", grew>>20)
	if want := fmt.Sprintf("3\t%d", maxArrayIndex-1); len(logs(h)) != 1 || logs(h)[0] != want {
		t.Errorf("logs %q, want %q", logs(h), want)
	}
	// The array part up to maxArrayIndex, 64 MiB, and the copies made as
	// append grew it by a quarter at a time (about 5 x 64 MiB in all;
	// without the bound, t[6e7] = 1 allocated 4.7 GB).
	if bound := uint64(8 * maxArrayIndex * 16); grew > bound {
		t.Errorf("the call allocated %d MiB, more than %d MiB", grew>>20, bound>>20)
	}
}

// A rule whose tables grow a little in each of many short calls is
// measured too: instructions are counted per rule, not per call (each call
// here runs far fewer than hookInterval of them).
func TestTableGrowthAcrossShortCalls(t *testing.T) {
	const limit = 8 << 20
	s := startRule(t, `
keep = {}
function on_event(ev)
  for i = 1, 100 do keep[#keep + 1] = {i} end
end`, abitest.New(), abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
	var err error
	calls := 0
	for ; calls < 5000 && err == nil; calls++ { // 500,000 tables: several times the limit
		err = s.Handle(context.Background(), setEvent("k", "v"))
	}
	t.Logf("%v after %d calls", err, calls)
	wantErr(t, err, abi.ErrMemory, 4)
}
