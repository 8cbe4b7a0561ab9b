package host

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// assign gives every rule one owner among the members, none more than
// ceil(R/N), the same whatever the order of its inputs; a member joining
// moves at most a bounded number of rules above the ideal R/(N+1).
func TestAssignBoundedAndStable(t *testing.T) {
	for _, tc := range []struct{ rules, members int }{{30, 3}, {30, 4}, {1, 2}, {7, 7}, {1000, 20}, {5, 8}} {
		var rules, members []string
		for i := range tc.rules {
			rules = append(rules, fmt.Sprintf("r%04d.lua", i))
		}
		for i := range tc.members {
			members = append(members, fmt.Sprintf("host-%d", i))
		}
		got := assign(rules, members)
		per := map[string]int{}
		for _, r := range rules {
			if got[r] == "" {
				t.Fatalf("%d/%d: rule %s has no owner", tc.rules, tc.members, r)
			}
			per[got[r]]++
		}
		bound := ceilDiv(tc.rules, tc.members)
		for m, n := range per {
			if n > bound {
				t.Fatalf("%d/%d: %s owns %d, bound %d", tc.rules, tc.members, m, n, bound)
			}
		}
		rev := append([]string(nil), members...)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		again := assign(rules, rev)
		for _, r := range rules {
			if again[r] != got[r] {
				t.Fatalf("%d/%d: rule %s owned by %s or %s depending on the members' order", tc.rules, tc.members, r, got[r], again[r])
			}
		}
		joined := assign(rules, append(members, "host-new"))
		moved := 0
		for _, r := range rules {
			if joined[r] != got[r] {
				moved++
			}
		}
		if ideal := tc.rules / (tc.members + 1); moved > 2*ideal+2 {
			t.Fatalf("%d/%d: a join moved %d rules, ideal %d", tc.rules, tc.members, moved, ideal)
		}
	}
}

// Bad group settings are refused with what is wrong.
func TestGroupConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  GroupConfig
		want string
	}{
		{GroupConfig{}, "a name is required"},
		{GroupConfig{Name: "a/b"}, `group "a/b": names hold only`},
		{GroupConfig{Name: "ok", TTL: time.Millisecond}, "below the 300ms minimum"},
	} {
		if err := tc.cfg.validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (GroupConfig{Name: "line-1_a.b"}).validate(); err != nil {
		t.Fatal(err)
	}
}

// Members with different rule sets: each rule goes to a member that has
// it, whatever the order of the inputs; a rule no member has goes to none;
// the bound ceil(R/N) holds when the sets allow it, and a member with no
// rule (or an unreadable set) gets none.
func TestAssignOnlyToMembersWithTheRule(t *testing.T) {
	set := func(names ...string) ruleSet {
		s := ruleSet{}
		for _, n := range names {
			s[n] = ""
		}
		return s
	}
	rules := func(from, to int) []string {
		var out []string
		for i := from; i < to; i++ {
			out = append(out, fmt.Sprintf("r%03d", i))
		}
		return out
	}
	shared := rules(0, 40)
	have := map[string]ruleSet{
		"a":     set(append(rules(40, 60), shared...)...),
		"b":     set(append(rules(60, 80), shared...)...),
		"c":     set(shared...),
		"empty": set(),
		"bad":   nil,
	}
	got := assignAmong(have)
	if len(got) != 80 {
		t.Fatalf("%d rules assigned, want 80", len(got))
	}
	per := map[string]int{}
	for r, m := range got {
		if !have[m].has(r) {
			t.Fatalf("rule %s given to %s, which does not have it", r, m)
		}
		per[m]++
	}
	if bound := ceilDiv(80, 3); per["a"] > bound || per["b"] > bound || per["c"] > bound || per["empty"]+per["bad"] > 0 {
		t.Fatalf("loads %v, bound %d", per, bound)
	}
	// the same from a rebuilt map (another iteration order)
	again := map[string]ruleSet{}
	for _, m := range []string{"bad", "c", "b", "empty", "a"} {
		again[m] = have[m]
	}
	if a := assignAmong(again); !maps.Equal(a, got) {
		t.Fatal("the assignment depends on the order of the members")
	}
	// a host that alone has many rules: they all go to it, beyond the bound
	lone := assignAmong(map[string]ruleSet{"a": set(rules(0, 30)...), "b": set("r000")})
	for r, m := range lone {
		if m != "a" && r != "r000" {
			t.Fatalf("rule %s given to %s", r, m)
		}
	}
	if lone["r000"] != "b" {
		t.Fatalf("the rule both have went to %s, want b (a is over the bound)", lone["r000"])
	}
	if len(assignAmong(map[string]ruleSet{"x": nil})) != 0 || len(assignAmong(nil)) != 0 {
		t.Fatal("rules assigned with no member that has any")
	}
}
