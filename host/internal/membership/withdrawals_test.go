package membership

import (
	"fmt"
	"maps"
	"slices"
	"testing"
)

// The rules of withdrawal, one step at a time: a failed version is
// withdrawn only while another member offers a readable version (its own
// content or another), once; the withdrawal holds while any other member
// offers the rule (though the versions change), and ends when none does any
// more (its members left or withdrew theirs) or when this host's file
// changes. A failure of content the file no longer has is no reason.
func TestWithdrawalsReview(t *testing.T) {
	w := Withdrawals{}
	hashes := map[string]string{"r": "1"}
	failed := []FailedLoad{{Rule: "r", Hash: "1", Err: "boom"}}
	review := func(sets map[string]RuleSet, failed []FailedLoad) []VersionChange {
		return w.Review("me", sets, hashes, failed)
	}
	if ch := review(map[string]RuleSet{"me": {"r": "1"}, "b": {"x": "1"}, "c": {"r": ""}}, failed); len(ch) != 0 {
		t.Fatalf("withdrawn with no other readable version: %+v", ch)
	}
	same := map[string]RuleSet{"me": {"r": "1"}, "b": {"r": "1"}}
	if ch := review(same, failed); len(ch) != 1 || !ch[0].Withdrawn || ch[0].Why != "members b offer the rule" {
		t.Fatalf("not withdrawn while another member offers the same content: %+v", ch)
	}
	if ch := review(same, failed); len(ch) != 0 {
		t.Fatalf("a second change for the same offers: %+v", ch)
	}
	delete(same, "b") // b left
	if ch := review(same, nil); len(ch) != 1 || ch[0].Withdrawn || ch[0].Why != "no other member offers the rule" || !w.Offers("r", "1") {
		t.Fatalf("not offered again when the other member left: %+v", ch)
	}
	if ch := review(map[string]RuleSet{"me": {"r": "1"}, "b": {"r": "2"}}, []FailedLoad{{Rule: "r", Hash: "0"}}); len(ch) != 0 {
		t.Fatalf("withdrawn for a failure of older content: %+v", ch)
	}
	sets := map[string]RuleSet{"me": {"r": "1"}, "b": {"r": "2"}, "c": {"r": "3"}, "d": {"r": "2"}}
	ch := review(sets, failed)
	if len(ch) != 1 || !ch[0].Withdrawn || ch[0].Why != "members b,c,d offer the rule" || ch[0].Err != "boom" || w.Offers("r", "1") {
		t.Fatalf("not withdrawn: %+v, %+v", ch, w)
	}
	if !w.Offers("r", "9") {
		t.Fatal("another version of the file counts as withdrawn")
	}
	sets["me"] = RuleSet{}
	if ch := review(sets, failed); len(ch) != 0 {
		t.Fatalf("a second change for the same versions: %+v", ch)
	}
	delete(sets, "d")
	sets["c"] = RuleSet{}         // c withdrew its version
	sets["b"] = RuleSet{"r": "4"} // b's changed
	if ch := review(sets, failed); len(ch) != 0 {
		t.Fatalf("changed while another version is still offered: %+v", ch)
	}
	sets["b"] = RuleSet{"r": "1"} // b now has this host's content
	if ch := review(sets, nil); len(ch) != 0 {
		t.Fatalf("changed while another member offers this host's content: %+v", ch)
	}
	sets["b"] = RuleSet{"r": ""} // b's file cannot be read
	if ch := review(sets, nil); len(ch) != 1 || ch[0].Withdrawn || ch[0].Why != "no other member offers the rule" || !w.Offers("r", "1") {
		t.Fatalf("not offered again when no other member offers the rule: %+v", ch)
	}
	sets["b"] = RuleSet{"r": "2"}
	review(sets, failed)
	delete(sets, "b") // b left
	if ch := review(sets, nil); len(ch) != 1 || ch[0].Withdrawn {
		t.Fatalf("not offered again when the other member left: %+v", ch)
	}
	sets["b"] = RuleSet{"r": "2"}
	review(sets, failed)
	hashes["r"] = "5" // the file changed
	if ch := review(sets, nil); len(ch) != 1 || ch[0].Why != "its file changed" || len(w) != 0 {
		t.Fatalf("not offered again when the file changed: %+v", ch)
	}
}

// A model of a group's steps, over every assignment of versions (a, b, c)
// to 1-4 members, every choice of the versions that load and of a member
// on which none loads (or none such), each member stepping in a random
// order, then after each of 6 random changes (a
// member leaves, comes back as a new process, or its file changes to
// another version, the owner's reload leaving its previous version running
// when the new one fails): the ownership settles (no step changes anything
// once it has), a version runs when a live member has one that loads, some
// live member always offers the rule, a rule that runs nowhere is owned by
// a member that did not withdraw its version (so it counts the failure:
// host/internal/group/ready.go), and between two changes no member
// withdraws its version more than once. Ending a withdrawal whenever the
// other versions changed (not only when none is offered) fails it:
// versions a, b, c that all fail were withdrawn and offered again in turn,
// one member 5 times. Withdrawing only for another version (as before)
// fails it too: with [a a] where a fails on member 1 only, member 1 owned
// the rule and ran nothing.
func TestWithdrawalsSettle(t *testing.T) {
	versions := []string{"a", "b", "c"}
	for n := 1; n <= 4; n++ {
		for combo := 0; combo < pow(3, n); combo++ {
			for loads := 0; loads < 8; loads++ {
				for bad := -1; bad < n; bad++ { // the member on which nothing loads
					for seed := range 3 {
						have := make([]string, n)
						for i, x := 0, combo; i < n; i, x = i+1, x/3 {
							have[i] = versions[x%3]
						}
						m := groupModel(have, func(i int, v string) bool { return i != bad && loads&(1<<(v[0]-'a')) != 0 }, uint64(seed))
						if err := m.run(); err != "" {
							t.Fatalf("versions %v, loading %03b, failing on member %d, seed %d: %s", have, loads, bad, seed, err)
						}
						for e := range 6 {
							what := m.churn(versions)
							if err := m.run(); err != "" {
								t.Fatalf("versions %v, loading %03b, failing on member %d, seed %d, change %d (%s): %s", have, loads, bad, seed, e, what, err)
							}
						}
					}
				}
			}
		}
	}
}

func pow(a, b int) int {
	out := 1
	for range b {
		out *= a
	}
	return out
}

// model is a group of members with one rule, each with its version, stepping
// as group.step does: publish its set (join), review, assign, hand over or
// take. Whether a member's load of its version fails depends on the version
// and the member (loads).
// The owner whose file changes reloads it: a version that fails leaves the
// previous one running, if one ran (the host's failed reload), and is no
// failed load the owner would withdraw.
type model struct {
	ids       []string
	have      []string // each member's version
	gone      []bool   // members not live
	loads     func(member int, version string) bool
	w         []Withdrawals
	published []RuleSet
	owner     int    // -1: none
	running   string // the version the owner runs; "": none (its load failed)
	withdrew  []int  // withdrawals by member since the last change
	rnd       uint64
}

// withdrawnBy reports whether member i withdrew its version.
func (m *model) withdrawnBy(i int) bool { return !m.w[i].Offers("r", m.have[i]) }

func groupModel(have []string, loads func(int, string) bool, seed uint64) *model {
	have = slices.Clone(have)
	m := &model{have: have, loads: loads, owner: -1, rnd: seed*2654435761 + 1,
		withdrew: make([]int, len(have)), gone: make([]bool, len(have))}
	for i := range have {
		m.ids = append(m.ids, fmt.Sprintf("m%d", i))
		m.w = append(m.w, Withdrawals{})
		m.published = append(m.published, RuleSet{"r": have[i]})
	}
	return m
}

func (m *model) rand(n int) int {
	m.rnd ^= m.rnd << 13
	m.rnd ^= m.rnd >> 7
	m.rnd ^= m.rnd << 17
	return int(m.rnd % uint64(n))
}

// churn makes a random change and says which.
func (m *model) churn(versions []string) string {
	clear(m.withdrew)
	i := m.rand(len(m.ids))
	live := 0
	for _, g := range m.gone {
		if !g {
			live++
		}
	}
	switch {
	case m.gone[i]: // a new process: nothing withdrawn yet
		m.gone[i], m.w[i] = false, Withdrawals{}
		return fmt.Sprintf("member %d back", i)
	case live > 1 && m.rand(2) == 0: // its lease lapses
		m.gone[i] = true
		if m.owner == i {
			m.owner, m.running = -1, ""
		}
		return fmt.Sprintf("member %d gone", i)
	default:
		m.change(i, versions[(slices.Index(versions, m.have[i])+1+m.rand(len(versions)-1))%len(versions)])
		return fmt.Sprintf("member %d now has %s", i, m.have[i])
	}
}

// change gives member i version v of the rule's file. Its withdrawal of
// the old content ends (standby()); the owner reloads: a version that
// fails leaves the previous one running, if one ran.
func (m *model) change(i int, v string) {
	clear(m.withdrew)
	m.have[i] = v
	delete(m.w[i], "r")
	if m.owner == i && m.loads(i, v) {
		m.running = v
	}
}

// step runs member i's step and reports whether anything changed.
func (m *model) step(i int) bool {
	pub := RuleSet{}
	if m.w[i].Offers("r", m.have[i]) {
		pub["r"] = m.have[i]
	}
	changed := !maps.Equal(pub, m.published[i])
	m.published[i] = pub
	sets := map[string]RuleSet{}
	for j, id := range m.ids {
		if !m.gone[j] {
			sets[id] = m.published[j]
		}
	}
	var failed []FailedLoad
	if m.owner == i && m.running == "" {
		failed = append(failed, FailedLoad{Rule: "r", Hash: m.have[i]})
	}
	if ch := m.w[i].Review(m.ids[i], sets, map[string]string{"r": m.have[i]}, failed); len(ch) > 0 {
		for _, c := range ch {
			if c.Withdrawn {
				m.withdrew[i]++
			}
		}
		return true
	}
	to := AssignAmong(sets)["r"]
	switch {
	case m.owner == i && to != m.ids[i]:
		m.owner, m.running = -1, ""
		return true
	case m.owner == -1 && to == m.ids[i]:
		m.owner = i
		if m.loads(i, m.have[i]) {
			m.running = m.have[i]
		}
		return true
	}
	return changed
}

// run steps the live members in a random order until a round changes
// nothing, then checks the outcome: "" when it is right.
func (m *model) run() string {
	var live []int
	for i, g := range m.gone {
		if !g {
			live = append(live, i)
		}
	}
	for round := 0; ; round++ {
		if round == 100 {
			return "no settling in 100 rounds"
		}
		changed := false
		for range 2 * len(live) {
			changed = m.step(live[m.rand(len(live))]) || changed
		}
		for _, i := range live { // every member once more
			changed = m.step(i) || changed
		}
		if !changed {
			break
		}
	}
	anyLoads, offered := false, false
	for _, i := range live {
		anyLoads = anyLoads || m.loads(i, m.have[i])
		offered = offered || m.published[i].Has("r")
		if m.withdrew[i] > 1 {
			return fmt.Sprintf("member %d withdrew %d times", i, m.withdrew[i])
		}
	}
	switch {
	case m.owner == -1:
		return "no owner"
	case !offered:
		return "withdrawn everywhere"
	case anyLoads && m.running == "":
		return fmt.Sprintf("owner %d runs nothing (its version %s fails there) while a member's version loads on it", m.owner, m.have[m.owner])
	case m.running == "" && m.withdrawnBy(m.owner):
		return fmt.Sprintf("the rule runs nowhere and its owner %d withdrew its version: no member counts the failure (host/internal/group/ready.go)", m.owner)
	}
	return ""
}

// Member p's version a fails and is withdrawn, member q's version b runs;
// q's file then changes to c, which fails too: q goes on running b (a
// failed reload), and p's withdrawal holds. Offering a again because b is
// no longer offered would let the assignment, when it prefers p, take the
// rule from q, which runs it, to p, where a fails again; p would withdraw
// a again and q, taking the rule back, would load c, which fails: the rule
// would run nowhere. (That variant, ending a withdrawal once no version
// offered when it was made is offered any more, also fails
// TestWithdrawalsSettle: versions [a a a] that all fail, member 0
// withdrew twice with no change in between.) Both members take each role,
// so the assignment prefers either.
func TestWithdrawalHoldsWhileOwnerRunsPrevious(t *testing.T) {
	withdrawn := 0
	for p := range 2 {
		q := 1 - p
		for seed := range 10 {
			have := make([]string, 2)
			have[p], have[q] = "a", "b"
			m := groupModel(have, func(_ int, v string) bool { return v == "b" }, uint64(seed))
			if err := m.run(); err != "" || m.owner != q || m.running != "b" {
				t.Fatalf("member %d with a, seed %d: %s; owner %d runs %q", p, seed, err, m.owner, m.running)
			}
			w := m.withdrawnBy(p) // when the assignment prefers p
			if w {
				withdrawn++
			}
			m.change(q, "c")
			if err := m.run(); err != "" || m.owner != q || m.running != "b" || m.withdrawnBy(p) != w {
				t.Fatalf("member %d with a, seed %d, member %d now has c: %s; owner %d runs %q, member %d withdrawn: %v (was %v)",
					p, seed, q, err, m.owner, m.running, p, m.withdrawnBy(p), w)
			}
		}
	}
	if withdrawn == 0 {
		t.Fatal("no case withdrew a: the assignment never preferred the member that has it")
	}
}
