package host

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
)

// Permissions tightened with SetRuleConfig apply to the running rule at its
// next call, without a reload; loosened again, they apply as well.
func TestSetRuleConfigAppliesLive(t *testing.T) {
	e := newEnv(t)
	errc := make(chan error, 1)
	e.load("writer", goRule{init: watchInit("go"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(ctx, "out/"+string(ev.Value), ev.Value, abi.SetOptions{})
		errc <- err
		return nil
	}})
	e.set("go", "1")
	if err := <-errc; err != nil {
		t.Fatalf("write before the change: %v", err)
	}
	before := e.status("writer")

	tight := map[string]RuleConfig{"writer.gorule": {Write: []string{"elsewhere/**"}, MaxValueBytes: 4}}
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, tight); err != nil {
		t.Fatal(err)
	}
	e.set("go", "2")
	if err := <-errc; abi.StatusOf(err) != abi.StatusDenied {
		t.Fatalf("write after write permission was narrowed: %v, want DENIED", err)
	}
	if _, ok := e.get("out/2"); ok {
		t.Fatal("denied write was stored")
	}
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, map[string]RuleConfig{"*.gorule": {MaxValueBytes: 4}}); err != nil {
		t.Fatal(err)
	}
	e.set("go", "12345")
	if err := <-errc; abi.StatusOf(err) != abi.StatusTooLarge {
		t.Fatalf("5-byte value after max_value 4 from a glob: %v, want TOO_LARGE", err)
	}
	e.set("go", "3")
	if err := <-errc; err != nil {
		t.Fatalf("write after the permission was given back: %v", err)
	}
	if after := e.status("writer"); after.Abandoned != before.Abandoned || after.Disabled {
		t.Fatalf("the rule was disturbed: %+v", after)
	}
}

// A bad setting is refused with the rule pattern named, and the previous
// settings stay in force.
func TestSetRuleConfigRefusesBadSettings(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"writer.gorule": {Write: []string{}}}
	})
	errc := make(chan error, 1)
	e.load("writer", goRule{init: watchInit("go"), handle: func(ctx context.Context, h abi.Host, _ abi.Event) error {
		_, err := h.Set(ctx, "out", []byte("x"), abi.SetOptions{})
		errc <- err
		return nil
	}})
	for _, bad := range []map[string]RuleConfig{
		{"writer.gorule": {Write: []string{"a/[b"}}},
		{"[": {}},
		{"writer.gorule": {Mailbox: -1}},
	} {
		err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, bad)
		var name string
		for k := range bad {
			name = k
		}
		if err == nil || !strings.Contains(err.Error(), name) {
			t.Fatalf("SetRuleConfig(%v) = %v, want an error naming %q", bad, err, name)
		}
	}
	// Each entry is valid alone; together they give the loaded rule
	// concurrency and a canary, which its load would refuse.
	split := map[string]RuleConfig{"*.gorule": {Concurrency: 4}, "writer.gorule": {Canary: Canary{Events: 5}}}
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, split); err == nil ||
		!strings.Contains(err.Error(), "writer.gorule: concurrency: 4 cannot be combined with canary") {
		t.Fatalf("concurrency and canary from two entries: %v", err)
	}
	e.set("go", "1")
	if err := <-errc; abi.StatusOf(err) != abi.StatusDenied {
		t.Fatalf("write after refused settings: %v, want DENIED (the old settings)", err)
	}
}

func TestUnmatchedRules(t *testing.T) {
	rules := map[string]RuleConfig{"a.lua": {}, "*.wasm": {}, "typo.lua": {}, "x*.lua": {}}
	got := UnmatchedRules(rules, []string{"/r/a.lua", "/r/b.wasm"})
	if want := []string{"typo.lua", "x*.lua"}; !slices.Equal(got, want) {
		t.Fatalf("UnmatchedRules = %v, want %v", got, want)
	}
}

// A narrowed watch permission removes the rule's watches it no longer
// allows: their changes stop reaching it, the others go on.
func TestSetRuleConfigDropsWatchesNoLongerAllowed(t *testing.T) {
	e := newEnv(t)
	evs := make(chan string, 16)
	e.load("watcher", goRule{init: watchInit("a", "b"), handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
		evs <- ev.Key + "=" + string(ev.Value)
		return nil
	}})
	e.set("b", "1")
	if got := <-evs; got != "b=1" {
		t.Fatalf("event %q, want b=1", got)
	}
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, map[string]RuleConfig{"watcher.gorule": {Watch: []string{"a"}}}); err != nil {
		t.Fatal(err)
	}
	if w := e.status("watcher").Watches; !slices.Equal(w, []string{"a"}) {
		t.Fatalf("watches after narrowing: %v, want [a]", w)
	}
	// b's change is notified before a's, if at all: a's event arriving
	// first shows b's did not come.
	e.set("b", "2")
	e.set("a", "2")
	if got := <-evs; got != "a=2" {
		t.Fatalf("event %q after b's watch was removed, want a=2", got)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "watches of keys its new watch permission does not allow are removed") {
		t.Fatalf("removal not logged:\n%s", logs)
	}
}
