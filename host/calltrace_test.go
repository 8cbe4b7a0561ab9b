package host

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/observe"
	"github.com/ssrun/ssrun/host/provenance"
)

// callTracer is a Tracer that wants the host calls (or not) and keeps them
// as lines.
type callTracer struct {
	wants bool
	mu    sync.Mutex
	lines []string
}

func (c *callTracer) Ran(Run)                                         {}
func (c *callTracer) Skipped(Skip)                                    {}
func (c *callTracer) Wrote(string, provenance.Step, provenance.Cause) {}
func (c *callTracer) Denied(string, string, string)                   {}
func (c *callTracer) TracesCalls() bool                               { return c.wants }

func (c *callTracer) Called(rule string, tc TracedCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if tc.At.IsZero() || tc.Took < 0 {
		c.lines = append(c.lines, "bad times")
	}
	c.lines = append(c.lines, rule+" "+tc.Verb+" "+tc.Key+" "+tc.Status.String())
}

func (c *callTracer) got() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lines)
}

// A tracer that wants the host calls is told those a rule makes in its
// handlers (not at load), with their status, also with a Recorder; one
// that does not gets the rule's chain unwrapped.
func TestCallTracerSeesHandlerCallsForOTLP(t *testing.T) {
	for _, wants := range []bool{true, false} {
		ct := &callTracer{wants: wants}
		e := newEnv(t, func(o *Config) { o.Tracer, o.Recorder = ct, &callLog{} })
		var mu sync.Mutex
		var wrapped bool
		e.load("r", goRule{init: watchInit("in"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			mu.Lock()
			_, wrapped = h.(handed).Host.(*observe.Traced)
			mu.Unlock()
			if _, err := h.Get(ctx, "absent"); abi.StatusOf(err) != abi.StatusNotFound {
				return err
			}
			_, err := h.Set(ctx, "out", ev.Value, abi.SetOptions{})
			return err
		}})
		e.set("in", "1")
		waitFor(t, "event handled", func() bool { return e.status("r").Handled == 1 })
		var want []string
		if wants {
			want = []string{"r.gorule get absent NOT_FOUND", "r.gorule set out OK"}
		}
		mu.Lock()
		if wrapped != wants {
			t.Errorf("wants calls %v: the rule's host wrapped %v", wants, wrapped)
		}
		mu.Unlock()
		if got := ct.got(); !slices.Equal(got, want) {
			t.Errorf("wants calls %v: told %q, want %q", wants, got, want)
		}
	}
}

// RuleOf and HostOf find the rule and its Host behind every host the Host
// gives a rule: its binding, or the binding wrapped for a Recorder, for a
// tracer that wants the calls, or both.
func TestRuleOfAndHostOfSeeThroughTheHooks(t *testing.T) {
	for _, c := range []struct {
		name  string
		hooks func(*Config)
	}{
		{"none", func(*Config) {}},
		{"recorder", func(o *Config) { o.Recorder = &callLog{} }},
		{"call tracer", func(o *Config) { o.Tracer = &callTracer{wants: true} }},
		{"both", func(o *Config) { o.Tracer, o.Recorder = &callTracer{wants: true}, &callLog{} }},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, c.hooks)
			var mu sync.Mutex
			var rule string
			var ruleOK, hostOK bool
			e.load("r", goRule{init: func(ctx context.Context, h abi.Host) error {
				mu.Lock()
				defer mu.Unlock()
				rule, ruleOK = RuleOf(h)
				var got *Host
				got, hostOK = HostOf(h)
				hostOK = hostOK && got == e.host
				return nil
			}})
			mu.Lock()
			defer mu.Unlock()
			if rule != "r.gorule" || !ruleOK {
				t.Errorf("RuleOf: %q, %v; want r.gorule", rule, ruleOK)
			}
			if !hostOK {
				t.Error("HostOf did not find the rule's Host")
			}
		})
	}
}
