package lua

import (
	"context"
	"fmt"
	"runtime/metrics"
	"strings"
	"testing"
	"time"

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
	groups := make([]string, 10) // 200 operands: a flat chain cannot compile past ~198 registers
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
