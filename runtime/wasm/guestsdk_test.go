package wasm

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// TestVerbAllocations counts the Go guest's heap allocations per verb call
// (runtime.MemStats inside the guest, over n calls of each BenchmarkVerbs
// row). An allocation costs the guest about as much as several host calls,
// so the SDK may allocate only what it returns: get one block for the
// value and its version, set and lock their version or token string, the
// routine failures (NOT_FOUND, NOT_APPLIED) a share of one allocation per
// 32 errors, the other verbs nothing; and the arguments must not escape
// (a value built in the call stays on the caller's stack).
func TestVerbAllocations(t *testing.T) {
	const n = 256
	h := abitest.New()
	h.Put("bench/k", []byte("0123456789abcdef"))
	s := ruleScript(t, h, abi.Limits{})
	for _, tc := range []struct {
		verb string
		max  int // allocations in n calls
	}{
		{"floor", 0},
		{"get", n},
		{"set", n},
		{"set-literal", n}, // the value stays on the caller's stack
		{"del", n / 16},    // NOT_FOUND
		{"vdel", n / 16},   // NOT_APPLIED
		{"set+del", n},
		{"set+vdel", n},
		{"watch", 0},
		{"watch+unwatch", 0},
		{"lock", n},
		{"lock+unlock", n},
		{"log", 0},
		{"timer", 0},
		{"timer+cancel", 0},
		{"now", 0},
	} {
		got := run(t, s, h, command("allocs", tc.verb, fmt.Sprint(n)))
		var mallocs int
		if _, err := fmt.Sscanf(got, "allocs verb="+tc.verb+" n=256 mallocs=%d", &mallocs); err != nil {
			t.Fatalf("%s: report %q: %v", tc.verb, got, err)
		}
		if mallocs > tc.max {
			t.Errorf("%s: %d allocations in %d calls, want at most %d", tc.verb, mallocs, n, tc.max)
		}
	}
}

// TestVerbErrorText: a verb's error has its status at once and the host's
// message when asked for; a NOT_FOUND or NOT_APPLIED error first asked for
// after another call failed (the host keeps the last message only) says
// its verb, key and status instead; the other statuses keep the host's
// message from the start; errors.As finds an *Error with both.
func TestVerbErrorText(t *testing.T) {
	h := abitest.New()
	h.Put("errtext/k", []byte("v"))
	s := ruleScript(t, h, abi.Limits{})
	if err := s.Handle(context.Background(), command("errtext")); err != nil {
		t.Fatal(err)
	}
	got := strings.Join(reports(h), "\n")
	want := strings.Join([]string{
		`errtext not-found status=NOT_FOUND as=NOT_FOUND msg="del \"errtext/absent2\": not found"`,
		`errtext not-applied status=NOT_APPLIED as=NOT_APPLIED msg="vdel \"errtext/k\": value differs"`,
		`errtext kept-not-found status=NOT_FOUND as=NOT_FOUND msg="del \"errtext/absent1\": NOT_FOUND"`,
		`errtext kept-invalid status=INVALID as=INVALID msg="timer \"errtext/t\": negative delay or period"`,
		`errtext kept-not-applied status=NOT_APPLIED as=NOT_APPLIED msg="vdel \"errtext/k\": value differs"`,
		`errtext last status=INVALID as=INVALID msg="lock \"errtext/l\": ttl -1000 ms out of range"`,
		`errtext wrapped status=NOT_FOUND as=NOT_FOUND msg="ctx: del \"errtext/absent2\": not found"`,
	}, "\n")
	if got != want {
		t.Errorf("reports:\n%s\nwant:\n%s", got, want)
	}
}
