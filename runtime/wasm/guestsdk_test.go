package wasm

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// TestVerbAllocations counts the Go guest's heap allocations per verb call
// (runtime.MemStats inside the guest, over n calls of each BenchmarkVerbs
// row). An allocation costs the guest about eight host calls
// (BenchmarkGuestSteps), so the SDK's success paths allocate nothing of
// their own: get, set and lock carve their results from shared 1 KiB
// blocks (a block per 16 calls at most here), the other verbs allocate
// nothing, a routine failure (NOT_FOUND, NOT_APPLIED) repeating the last
// one returns the same error, and the arguments do not escape (a value
// built in the call stays on the caller's stack).
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
		{"get", n / 16},
		{"set", n / 16},
		{"set-literal", n / 16}, // the value stays on the caller's stack
		{"del", 0},              // NOT_FOUND, repeated
		{"vdel", 0},             // NOT_APPLIED, repeated
		{"set+del", n / 16},
		{"set+vdel", n / 16},
		{"watch", 0},
		{"watch+unwatch", 0},
		{"unwatch", 0}, // NOT_FOUND, repeated
		{"lock", n / 16},
		{"lock+unlock", n / 16},
		{"unlock", 0}, // NOT_FOUND, repeated
		{"log", 0},
		{"timer", 0},
		{"timer+cancel", 0},
		{"cancel", 0}, // NOT_FOUND, repeated
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
		t.Logf("%s: %d allocations in %d calls", tc.verb, mallocs, n)
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

// TestVerbResultsOwnMemory: results of consecutive calls (values,
// versions, tokens; the small ones carved from shared blocks) do not
// alias or overwrite each other, and appending to a value copies it
// (the rule's ownmem command checks in the guest).
func TestVerbResultsOwnMemory(t *testing.T) {
	h := abitest.New()
	h.Put("own/small", []byte("s"))
	h.Put("own/big", bytes.Repeat([]byte("b"), 1000))
	s := ruleScript(t, h, abi.Limits{})
	if got := run(t, s, h, command("ownmem")); got != "ownmem ok" {
		t.Fatal(got)
	}
}

// TestVerbErrorReuse: a routine failure repeating the last one (same
// verb, key and status) returns the same error value, whose text, status,
// errors.As and errors.Is still work; another key, verb or status gets an
// error of its own (the rule's errreuse command checks in the guest).
func TestVerbErrorReuse(t *testing.T) {
	h := abitest.New()
	h.Put("reuse/k", []byte("v"))
	s := ruleScript(t, h, abi.Limits{})
	if got := run(t, s, h, command("errreuse")); got != "errreuse ok" {
		t.Fatal(got)
	}
}

// TestVerbsConcurrently: the verbs called from 8 goroutines of the guest
// at once, each get seeing the value and version its goroutine set (the
// rule's concurrent command). Values longer than a result block take the
// `result` path, where the SDK's test hook yields inside the verb, so the
// other goroutines find the guard held and wait (without the guard, a get
// fetches another goroutine's record).
func TestVerbsConcurrently(t *testing.T) {
	h := abitest.New()
	// 8 goroutines yielding inside verbs are slow under -race on a loaded
	// machine: the deadline only stops a hung guest.
	s := ruleScript(t, h, abi.Limits{CallTimeout: time.Minute})
	if got := run(t, s, h, command("concurrent")); got != "concurrent ok" {
		t.Fatal(got)
	}
	if n := h.Calls(abi.FnGet); n != 8*60 {
		t.Errorf("host get called %d times, want %d", n, 8*60)
	}
}
