package host

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// A runtime may lend Set, VDel and Timer a view of its sandbox's memory
// (abi.Host), which the sandbox reuses once the call returns: the host
// keeps none of it. A rule that scribbles over the values it wrote, as a
// WebAssembly guest reusing its buffer does, changes neither a dry run's
// staged write (read back, and reported), a recorded call, nor a timer's
// payload.
func TestLentValueNotKept(t *testing.T) {
	var staged stagedLog
	rec := &keptCalls{}
	fired := make(chan string, 1)
	e := newEnv(t, func(c *Config) { c.DryRun = staged.add; c.Recorder = rec })
	e.load("lender", goRule{
		init: watchInit("go"),
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if ev.Op == abi.OpTimer {
				fired <- string(ev.Value)
				return nil
			}
			buf := []byte("first")
			if _, err := h.Set(ctx, "out", buf, abi.SetOptions{}); err != nil {
				return err
			}
			if _, err := h.Set(ctx, "gone", []byte("kept"), abi.SetOptions{}); err != nil {
				return err
			}
			match := []byte("kept")
			if err := h.VDel(ctx, "gone", match, abi.DelOptions{}); err != nil {
				return err
			}
			payload := []byte("ping")
			if err := h.Timer(ctx, "tick", 0, abi.TimerOptions{Payload: payload}); err != nil {
				return err
			}
			copy(buf, "XXXXX")
			copy(match, "YYYY")
			copy(payload, "ZZZZ")
			if v, err := h.Get(ctx, "out"); err != nil || string(v.Data) != "first" {
				return fmt.Errorf("get out after the buffer changed: %q, %v; want the staged \"first\"", v.Data, err)
			}
			return nil
		},
	})
	e.set("go", "1")
	select {
	case got := <-fired:
		if got != "ping" {
			t.Errorf("the timer fired with payload %q, want the \"ping\" it was armed with", got)
		}
	case <-time.After(time.Minute):
		t.Fatal("the timer armed to fire at once did not fire in a minute")
	}
	waitFor(t, "the event handled", func() bool { s := e.status("lender"); return s.Handled+s.Failed == 2 })
	if s := e.status("lender"); s.Failed != 0 {
		t.Fatalf("the rule failed: %s", s.LastError)
	}
	lines := staged.lines()
	for _, want := range []string{`dry-run: SET out "first"`, `dry-run: VDEL gone "kept"`} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("no staged write starts with %s; staged:\n%s", want, strings.Join(lines, "\n"))
		}
	}
	calls := rec.lines()
	for _, want := range []string{`set out "first"`, `vdel gone "kept"`, `timer tick "ping"`} {
		if !slices.Contains(calls, want) {
			t.Errorf("no recorded call %s; recorded:\n%s", want, strings.Join(calls, "\n"))
		}
	}
}

// keptCalls is a Recorder that keeps the calls it is told as they are
// (callLog formats them at once) and formats them when asked.
type keptCalls struct {
	mu    sync.Mutex
	calls []Call
}

func (*keptCalls) RecordEvent(string, int64, abi.Event) {}
func (*keptCalls) RecordConnection(int64, bool)         {}

func (k *keptCalls) RecordCall(_ string, _ int64, c Call) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.calls = append(k.calls, c)
}

func (k *keptCalls) lines() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, c := range k.calls {
		out = append(out, fmt.Sprintf("%s %s %q", c.Verb, c.Key, c.Value))
	}
	return out
}
