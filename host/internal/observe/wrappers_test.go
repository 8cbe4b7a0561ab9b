package observe

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/provenance"
)

// calls is a Recorder and a CallTracer that keeps what it is told as lines.
type calls struct{ lines []string }

func (c *calls) RecordEvent(rule string, atMs int64, ev abi.Event) {}
func (c *calls) RecordConnection(atMs int64, up bool)              {}
func (c *calls) RecordCall(rule string, atMs int64, call Call) {
	c.lines = append(c.lines, fmt.Sprintf("%s %d %s %s %s err=%q found=%v", rule, atMs, call.Verb, call.Key, call.Status, call.Err, call.Found))
}
func (c *calls) TracesCalls() bool { return true }
func (c *calls) Called(rule string, tc TracedCall) {
	if tc.At.IsZero() || tc.Took < 0 {
		c.lines = append(c.lines, "bad times")
	}
	c.lines = append(c.lines, fmt.Sprintf("%s %s %s %s", rule, tc.Verb, tc.Key, tc.Status))
}

func (c *calls) take() []string {
	l := c.lines
	c.lines = nil
	return l
}

// A Recorded host reports each call with its reply at the host's clock
// (now at its own reading), and nothing while its version is a shadow.
func TestRecordedReportsCallsWithTheirReplies(t *testing.T) {
	ctx := context.Background()
	base := abitest.New()
	base.SetNow(7)
	rec := &calls{}
	shadow := false
	h := &Recorded{Next: base, Rec: rec, Name: "r.lua", Shadow: func() bool { return shadow }, NowMs: func() int64 { return 42 }}
	if _, err := h.Set(ctx, "k", []byte("v"), abi.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Get(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Get(ctx, "absent"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Fatalf("get absent: %v", err)
	}
	if _, err := h.Keys(ctx, "k*", abi.KeysOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := h.Now(); got != 7 {
		t.Fatalf("now: %d, want 7", got)
	}
	want := []string{
		`r.lua 42 set k OK err="" found=false`,
		`r.lua 42 get k OK err="" found=true`,
		`r.lua 42 get absent NOT_FOUND err="get \"absent\": not found" found=false`,
		`r.lua 42 keys k* OK err="" found=false`,
		`r.lua 7 now  OK err="" found=false`,
	}
	if got := rec.take(); !slices.Equal(got, want) {
		t.Errorf("recorded\n  %q\nwant\n  %q", got, want)
	}
	shadow = true
	if _, err := h.Set(ctx, "k", []byte("w"), abi.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	h.Now()
	if got := rec.take(); len(got) != 0 {
		t.Errorf("a shadow's calls were recorded: %q", got)
	}
}

// A Traced host tells the calls made during a handler, and neither those
// outside one nor a shadow's.
func TestTracedTellsHandlerCalls(t *testing.T) {
	ctx := context.Background()
	ct := &calls{}
	shadow, handling := false, false
	h := &Traced{Next: abitest.New(), T: ct, Name: "r.lua", Shadow: func() bool { return shadow }, Handling: func() bool { return handling }}
	call := func() {
		if _, err := h.Set(ctx, "k", []byte("v"), abi.SetOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := h.Del(ctx, "absent", abi.DelOptions{}); abi.StatusOf(err) != abi.StatusNotFound {
			t.Fatalf("del absent: %v", err)
		}
	}
	call()
	if got := ct.take(); len(got) != 0 {
		t.Errorf("calls outside a handler told: %q", got)
	}
	handling = true
	call()
	if got, want := ct.take(), []string{"r.lua set k OK", "r.lua del absent NOT_FOUND"}; !slices.Equal(got, want) {
		t.Errorf("told %q, want %q", got, want)
	}
	shadow = true
	call()
	if got := ct.take(); len(got) != 0 {
		t.Errorf("a shadow's calls told: %q", got)
	}
}

// tracer keeps what a Tracer is told.
type tracer struct {
	runs  []Run
	skips []Skip
	steps []provenance.Step
}

func (t *tracer) Ran(r Run)      { t.runs = append(t.runs, r) }
func (t *tracer) Skipped(s Skip) { t.skips = append(t.skips, s) }
func (t *tracer) Wrote(rule string, s provenance.Step, c provenance.Cause) {
	t.steps = append(t.steps, s)
}
func (t *tracer) Denied(rule, verb, key string) {}

// The reports tell a tracer what the host saw, and are no-ops without one.
func TestReportsTellATracer(t *testing.T) {
	at := time.Unix(100, 0)
	c := clock.NewVirtual(at)
	ev := abi.Event{Key: "k", Op: abi.OpSet, Version: "v1"}
	clip := func(s string) string { return s[:3] }
	Ran(nil, "r", ev, provenance.Lineage{}, at, time.Second, errors.New("boom"), clip)
	Skipped(nil, "r", ev, provenance.Lineage{}, SkipEcho, c)
	Coalesced(nil, "r", ev, provenance.Lineage{}, "v2", c)
	Damped(nil, ev, provenance.Lineage{}, c)
	Wrote(nil, "r", "k", "set", "v1", provenance.Cause{})

	tr := &tracer{}
	Ran(tr, "r", ev, provenance.Lineage{}, at, time.Second, errors.New("boom"), clip)
	Ran(tr, "r", ev, provenance.Lineage{}, at, time.Second, nil, clip)
	Skipped(tr, "r", ev, provenance.Lineage{}, SkipEcho, c)
	Coalesced(tr, "r", ev, provenance.Lineage{}, "v2", c)
	Damped(tr, ev, provenance.Lineage{}, c)
	Wrote(tr, "r", "k", "set", "v1", provenance.Cause{})
	if len(tr.runs) != 2 || tr.runs[0].Err != "boo" || tr.runs[1].Err != "" || tr.runs[0].Rule != "r" || tr.runs[0].Took != time.Second || tr.runs[0].Event.Key != "k" {
		t.Errorf("runs: %+v", tr.runs)
	}
	want := []Skip{
		{Rule: "r", Reason: SkipEcho, At: at},
		{Rule: "r", Reason: SkipCoalesced, At: at, Into: "v2"},
		{Reason: SkipDamped, At: at},
	}
	if len(tr.skips) != len(want) {
		t.Fatalf("skips: %+v", tr.skips)
	}
	for i, s := range tr.skips {
		if s.Rule != want[i].Rule || s.Reason != want[i].Reason || !s.At.Equal(want[i].At) || s.Into != want[i].Into || s.Event.Key != "k" {
			t.Errorf("skip %d: %+v, want %+v", i, s, want[i])
		}
	}
	if len(tr.steps) != 1 || tr.steps[0] != (provenance.Step{Rule: "r", Key: "k", Op: "set", Version: "v1"}) {
		t.Errorf("steps: %+v", tr.steps)
	}
}
