package membership

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
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

// Members with different rule sets: each rule goes to a member that has
// it, whatever the order of the inputs; a rule no member has goes to none;
// the bound ceil(R/N) holds when the sets allow it, and a member with no
// rule (or an unreadable set) gets none.
func TestAssignOnlyToMembersWithTheRule(t *testing.T) {
	set := func(names ...string) RuleSet {
		s := RuleSet{}
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
	have := map[string]RuleSet{
		"a":     set(append(rules(40, 60), shared...)...),
		"b":     set(append(rules(60, 80), shared...)...),
		"c":     set(shared...),
		"empty": set(),
		"bad":   nil,
	}
	got := AssignAmong(have)
	if len(got) != 80 {
		t.Fatalf("%d rules assigned, want 80", len(got))
	}
	per := map[string]int{}
	for r, m := range got {
		if !have[m].Has(r) {
			t.Fatalf("rule %s given to %s, which does not have it", r, m)
		}
		per[m]++
	}
	if bound := ceilDiv(80, 3); per["a"] > bound || per["b"] > bound || per["c"] > bound || per["empty"]+per["bad"] > 0 {
		t.Fatalf("loads %v, bound %d", per, bound)
	}
	// the same from a rebuilt map (another iteration order)
	again := map[string]RuleSet{}
	for _, m := range []string{"bad", "c", "b", "empty", "a"} {
		again[m] = have[m]
	}
	if a := AssignAmong(again); !maps.Equal(a, got) {
		t.Fatal("the assignment depends on the order of the members")
	}
	// a host that alone has many rules: they all go to it, beyond the bound
	lone := AssignAmong(map[string]RuleSet{"a": set(rules(0, 30)...), "b": set("r000")})
	for r, m := range lone {
		if m != "a" && r != "r000" {
			t.Fatalf("rule %s given to %s", r, m)
		}
	}
	if lone["r000"] != "b" {
		t.Fatalf("the rule both have went to %s, want b (a is over the bound)", lone["r000"])
	}
	if len(AssignAmong(map[string]RuleSet{"x": nil})) != 0 || len(AssignAmong(nil)) != 0 {
		t.Fatal("rules assigned with no member that has any")
	}
}

// The roster's lines: "ID DIGEST" members, sorted; anything else (an older
// ssrun's bare id, a bad digest, a duplicate, junk) is not a member, with
// why.
func TestParseRoster(t *testing.T) {
	d1, d2 := strings.Repeat("a", digestLen), strings.Repeat("0", digestLen)
	in := strings.Join([]string{
		"b " + d1, "", "a " + d2, "old-host", "c " + d1[:10], "d " + d1 + " extra",
		"b " + d2, "e " + strings.ToUpper(d1), "\x01 " + d1, "f\t" + d2 + "\r",
	}, "\n")
	got, bad := ParseRoster([]byte(in))
	want := []RosterEntry{{"a", d2}, {"b", d1}, {"f", d2}}
	if !slices.Equal(got, want) {
		t.Fatalf("members %v, want %v", got, want)
	}
	if len(bad) != 6 {
		t.Fatalf("%d bad lines, want 6: %v", len(bad), bad)
	}
	if !strings.Contains(bad[0].Why, "older ssrun") {
		t.Fatalf("a bare id: %q", bad[0].Why)
	}
	if back, _ := ParseRoster(FormatRoster(got)); !slices.Equal(back, got) {
		t.Fatalf("round trip: %v", back)
	}
}

// A stored rule set is accepted only under its own digest, and only with
// rule file names in it.
func TestDecodeRuleSet(t *testing.T) {
	d, v := RuleSet{"a.lua": "12", "b.wasm": ""}.Encode()
	if s, err := DecodeRuleSet(d, v); err != nil || !s.Has("a.lua") || !s.Has("b.wasm") || len(s) != 2 {
		t.Fatalf("round trip: %v, %v", s, err)
	}
	if d2, _ := (RuleSet{"b.wasm": "", "a.lua": "12"}).Encode(); d2 != d {
		t.Fatal("equal sets have different digests")
	}
	if _, err := DecodeRuleSet(strings.Repeat("0", digestLen), v); err == nil {
		t.Fatal("accepted under another digest")
	}
	for _, bad := range []string{`[1]`, `{"../x":"1"}`, `{"/":"1"}`, `{"..":"1"}`, `{"":"1"}`, `{"a":1}`} {
		if _, err := DecodeRuleSet(SetDigest([]byte(bad)), []byte(bad)); err == nil {
			t.Fatalf("accepted %s", bad)
		}
	}
}

func FuzzParseRoster(f *testing.F) {
	f.Add([]byte("a " + strings.Repeat("a", digestLen) + "\nb " + strings.Repeat("1", digestLen)))
	f.Add([]byte("old-host\nother"))
	f.Add([]byte("x y z\n\n\t" + strings.Repeat("f", digestLen) + " " + strings.Repeat("f", digestLen)))
	f.Fuzz(func(t *testing.T, b []byte) {
		got, _ := ParseRoster(b)
		for i, e := range got {
			if !validMemberID(e.ID) || !validDigest(e.Digest) || i > 0 && got[i-1].ID >= e.ID {
				t.Fatalf("accepted %+v in %v", e, got)
			}
		}
		if back, bad := ParseRoster(FormatRoster(got)); !slices.Equal(back, got) || len(bad) > 0 {
			t.Fatalf("round trip of %v: %v, %v", got, back, bad)
		}
	})
}

func FuzzDecodeRuleSet(f *testing.F) {
	_, v := RuleSet{"a.lua": "12"}.Encode()
	f.Add(v)
	f.Add([]byte(`{"a/b":"1"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := DecodeRuleSet(SetDigest(b), b)
		if err != nil {
			return
		}
		for name := range s {
			if name == "" || strings.ContainsRune(name, '/') {
				t.Fatalf("accepted name %q", name)
			}
		}
	})
}

// A seen record decodes only from a JSON object of versions: null (which
// json.Unmarshal turns into a nil map, and the host then wrote into) and
// other JSON values are refused.
func TestDecodeSeenRefusesWhatNoHostWrote(t *testing.T) {
	for _, in := range []string{`null`, `[]`, `"x"`, `1`, `{"k":1}`, `{`, ``} {
		if seen, err := DecodeSeen([]byte(in)); err == nil {
			t.Errorf("DecodeSeen(%s) = %v, want an error", in, seen)
		}
	}
	seen, err := DecodeSeen([]byte(`{"k":"v1","gone":""}`))
	if err != nil || len(seen) != 2 || seen["k"] != "v1" || seen["gone"] != "" {
		t.Fatalf("DecodeSeen of a record: %v, %v", seen, err)
	}
	empty, err := DecodeSeen([]byte(`{}`))
	if err != nil || empty == nil {
		t.Fatalf("DecodeSeen({}) = %v, %v: want an empty map that Note can write", empty, err)
	}
}

func FuzzDecodeSeen(f *testing.F) {
	f.Add([]byte(`{"a":"1:0:n"}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		seen, err := DecodeSeen(b)
		if err != nil {
			return
		}
		p := &Progress{Seen: seen}
		p.Note(abi.Event{Key: "fuzz/key", Op: abi.OpSet, Version: "v"}) // writes the map: never nil
		if p.Seen["fuzz/key"] != "v" || !p.Dirty {
			t.Fatalf("Note on %q: %v", b, p.Seen)
		}
	})
}

// ceilDiv is ceil(a/b).
func ceilDiv(a, b int) int { return (a + b - 1) / b }
