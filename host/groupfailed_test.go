package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/protocol"
)

// versionsCluster starts two hosts of a group with no shared rule, whose
// rule "good" and "good2" (two contents that load) watch in/x and write
// its value to out/x; "hostbound" is that rule too, but its initialisation
// fails on host 0 (as a plugin needing what that host lacks would); any
// other content is a version that fails to load (the runtime knows no
// rule by that name). It returns the cluster, its
// hosts, and a rule file name that the assignment gives host 0 when both
// offer it.
func versionsCluster(t *testing.T) (*cluster, []*member, string) {
	t.Helper()
	c, ms := versionsHosts(t)
	return c, ms, preferred(ms, 0)
}

// versionsHosts is versionsCluster without the choice of a name.
func versionsHosts(t *testing.T) (*cluster, []*member) {
	t.Helper()
	c := newCluster(t, 0, groupTestTTL)
	rule := func(i int) goRule { return goRule{init: watchInit("in/x"), handle: c.handler(i, "x")} }
	hostbound := func(i int) goRule {
		r := rule(i)
		if i == 0 {
			r.init = func(context.Context, abi.Host) error { return errors.New("needs what host 0 lacks") }
		}
		return r
	}
	c.custom = map[string]func(int) goRule{"good": rule, "good2": rule, "hostbound": hostbound}
	c.files = func(int) map[string]string { return nil }
	ms := []*member{c.start(), c.start()}
	waitFor(t, "both hosts members", func() bool {
		for _, m := range ms {
			if gs, _ := m.host.Group(); len(gs.Members) != 2 {
				return false
			}
		}
		return true
	})
	return c, ms
}

// preferred returns a rule file name that the assignment gives host i of
// ms when both offer it.
func preferred(ms []*member, i int) string {
	id, other := ms[i].client.ClientID(), ms[1-i].client.ClientID()
	for k := 0; ; k++ {
		n := fmt.Sprintf("v%d.gorule", k)
		if membership.AssignAmong(map[string]membership.RuleSet{id: {n: "a"}, other: {n: "b"}})[n] == id {
			return n
		}
	}
}

// put writes content to the rule file name of m's folder and loads it.
func (m *member) put(t *testing.T, name, content string) {
	t.Helper()
	p := filepath.Join(m.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.host.Load(ctx, p); err != nil {
		t.Fatal(err)
	}
}

// ruleStatus returns m's Status entries for the rule file name.
// leave closes m's host: it leaves the group (its leases released).
func (m *member) leave(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.host.Close(ctx); err != nil {
		t.Fatalf("close host %d: %v", m.i, err)
	}
}

func (m *member) ruleStatus(name string) []RuleStatus {
	var out []RuleStatus
	for _, st := range m.host.Status() {
		if filepath.Base(st.Path) == name {
			out = append(out, st)
		}
	}
	return out
}

// ownsFailed reports whether m owns the rule file name and lists it, once,
// as failed to load.
func (m *member) ownsFailed(name string) bool {
	gs, _ := m.host.Group()
	st := m.ruleStatus(name)
	return slices.Contains(gs.Owned, name) && len(st) == 1 && st[0].State == StateLoadFailed
}

// runsOn waits until the rule file name is owned and running on host i
// only.
func runsOn(t *testing.T, c *cluster, name string, i int) {
	t.Helper()
	waitFor(t, fmt.Sprintf("%s running on host %d only", name, i), func() bool {
		return slices.Equal(c.owners()[strings.TrimSuffix(name, ".gorule")], []int{i})
	})
}

// handles writes value to in/x and checks that the rule on host i, only,
// handled it: out/x holds its write.
func handles(t *testing.T, c *cluster, value string, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.user.Set(ctx, []byte("in/x"), []byte(value), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !c.waitHandled("x", value, time.Minute) {
		t.Fatalf("the rule did not handle %s", value)
	}
	if by := c.handledBy("x", value); !slices.Equal(by, []int{i}) {
		t.Fatalf("%s handled by hosts %v, want %d", value, by, i)
	}
	res, err := c.user.Get(ctx, []byte("out/x"), protocol.CallOptions{})
	if want := fmt.Sprintf("%s@%d", value, i); err != nil || string(res.Value) != want {
		t.Fatalf("out/x = %q (%v), want %q", res.Value, err, want)
	}
}

// withdrawnOnHost0 brings the rule name to host 0 in a version that fails
// to load there, then offers another version, which loads, on host 1: host
// 0, which the assignment prefers, withdraws its version and the rule runs
// on host 1.
func withdrawnOnHost0(t *testing.T, c *cluster, ms []*member, name string) {
	t.Helper()
	ms[0].put(t, name, "broken")
	waitFor(t, "host 0 owns the rule, failed to load", func() bool { return ms[0].ownsFailed(name) })
	ms[1].put(t, name, "good")
	runsOn(t, c, name, 1)
}

// Two hosts have different versions of a rule: the one on host 0, to
// which the assignment gives the rule, fails to load; host 1's loads. Host
// 0 withdraws its version (its roster line names a set without the rule),
// the rule moves to host 1 and handles an event there. Host 0's status
// shows its load error once (not also as standby) and the withdrawal.
// Before, host 0 kept the rule, "as it would fail elsewhere too": it ran
// nowhere.
func TestGroupMovesRuleWhoseVersionFailsToLoad(t *testing.T) {
	c, ms, name := versionsCluster(t)
	withdrawnOnHost0(t, c, ms, name)
	handles(t, c, "1", 1)

	gs, _ := ms[0].host.Group()
	if !slices.Equal(gs.Withdrawn, []string{name}) || gs.Withdrawals != 1 || len(gs.Standby) != 0 {
		t.Fatalf("host 0's group status %+v, want %s withdrawn once, no standby", gs, name)
	}
	if hs := ms[0].host.Stats(); hs.Withdrawn != 1 || hs.Standby != 0 {
		t.Fatalf("host 0's stats count %d withdrawn, %d standby; want 1, 0", hs.Withdrawn, hs.Standby)
	}
	st := ms[0].ruleStatus(name)
	if len(st) != 1 || st[0].State != StateLoadFailed || !strings.Contains(st[0].LastError, `no rule named "broken"`) {
		t.Fatalf("host 0's status of %s: %+v", name, st)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := c.rosterDigests(ctx)[ms[0].client.ClientID()]
	res, err := c.user.Get(ctx, []byte("$ssrun/group/g/rules/"+d), protocol.CallOptions{})
	if err != nil || !res.Found {
		t.Fatalf("host 0's rule set %s: %v %v", d, res.Found, err)
	}
	if s, err := membership.DecodeRuleSet(d, res.Value); err != nil || s.Has(name) {
		t.Fatalf("host 0's published set %v (%v) still offers %s", s, err, name)
	}
}

// The withdrawn version's file is fixed on host 0 (new content): host 0
// offers it again, the assignment gives the rule back to host 0, and it
// runs there in the new version.
func TestGroupOffersFixedVersionAgain(t *testing.T) {
	c, ms, name := versionsCluster(t)
	withdrawnOnHost0(t, c, ms, name)
	ms[0].put(t, name, "good2")
	runsOn(t, c, name, 0)
	handles(t, c, "2", 0)
	gs, _ := ms[0].host.Group()
	if len(gs.Withdrawn) != 0 || len(ms[0].ruleStatus(name)) != 1 {
		t.Fatalf("host 0: group status %+v, status %+v", gs, ms[0].ruleStatus(name))
	}
}

// Host 0's version fails to load; host 1, which the assignment prefers,
// offers another: the rule runs on host 1, and host 0 lists its own
// version as failed to load (once, not also as standby). Host 0's file is
// fixed while host 1 runs the rule: its new content has not failed, so
// host 0 lists the rule as standby and counts no failed load. Before, the
// first failure stayed in host 0's status and Stats.LoadFailed (the host
// not ready) for content it no longer had.
func TestGroupFixedStandbyVersionIsNotFailed(t *testing.T) {
	c, ms := versionsHosts(t)
	name := preferred(ms, 1)
	ms[0].put(t, name, "broken")
	waitFor(t, "host 0 owns the rule, failed to load", func() bool { return ms[0].ownsFailed(name) })
	ms[1].put(t, name, "good")
	runsOn(t, c, name, 1)
	if st := ms[0].ruleStatus(name); len(st) != 1 || st[0].State != StateLoadFailed {
		t.Fatalf("host 0's status: %+v", st)
	}
	ms[0].put(t, name, "good2")
	waitFor(t, "host 0's version offered again", func() bool {
		gs, _ := ms[0].host.Group()
		return len(gs.Withdrawn) == 0
	})
	if st := ms[0].ruleStatus(name); len(st) != 1 || st[0].State != StateStandby || ms[0].host.Stats().LoadFailed != 0 {
		t.Fatalf("host 0's status: %+v; %d failed loads", st, ms[0].host.Stats().LoadFailed)
	}
	runsOn(t, c, name, 1)
	handles(t, c, "1", 1)
}

// Host 1, whose version runs while host 0's is withdrawn, leaves the
// group: no other version is offered any more, so host 0 offers its own
// again, owns the rule and shows its load error (the rule is not left
// withdrawn everywhere).
func TestGroupOffersWithdrawnVersionWhenOtherLeaves(t *testing.T) {
	c, ms, name := versionsCluster(t)
	withdrawnOnHost0(t, c, ms, name)
	ms[1].leave(t)
	waitFor(t, "host 0 owns the rule again, failed to load", func() bool {
		gs, _ := ms[0].host.Group()
		return len(gs.Withdrawn) == 0 && ms[0].ownsFailed(name)
	})
}

// steps makes each host run its group's loop n more times (woken, and
// counted by the loop itself: no time bound is measured).
func steps(t testing.TB, ms []*member, n int) {
	t.Helper()
	for range n {
		for _, m := range ms {
			g := m.host.group
			was := g.Steps()
			g.Wake()
			waitFor(t, "a group step", func() bool { return g.Steps() > was })
		}
	}
}

// groupCounts sums the hosts' takeovers, hand-overs and withdrawals.
func groupCounts(ms []*member) [3]uint64 {
	var n [3]uint64
	for _, m := range ms {
		gs, _ := m.host.Group()
		n[0] += gs.Takeovers
		n[1] += gs.Handovers
		n[2] += gs.Withdrawals
	}
	return n
}

// owner returns the hosts that own the rule name.
func owner(ms []*member, name string) []int {
	var out []int
	for _, m := range ms {
		if gs, _ := m.host.Group(); slices.Contains(gs.Owned, name) {
			out = append(out, m.i)
		}
	}
	return out
}

// The same content fails to load on host 0 only (the initialisation of
// "hostbound" needs what host 0 lacks), which the assignment prefers: host
// 0 withdraws its version, as the other host offers the rule, and the rule
// runs on host 1 and handles an event there. Host 0 lists its failure and
// the withdrawal, and counts no failed load (the rule runs). Before, a
// member withdrew only for another version: the rule stayed on host 0,
// failed, and ran nowhere though host 1 could run it.
func TestGroupMovesRuleThatFailsOnlyOnItsOwner(t *testing.T) {
	c, ms, name := versionsCluster(t)
	ms[0].put(t, name, "hostbound")
	waitFor(t, "host 0 owns the rule, failed to load", func() bool { return ms[0].ownsFailed(name) })
	ms[1].put(t, name, "hostbound")
	runsOn(t, c, name, 1)
	handles(t, c, "1", 1)
	gs, _ := ms[0].host.Group()
	if !slices.Equal(gs.Withdrawn, []string{name}) || gs.Withdrawals != 1 {
		t.Fatalf("host 0's group status %+v, want %s withdrawn once", gs, name)
	}
	st := ms[0].ruleStatus(name)
	if len(st) != 1 || st[0].State != StateLoadFailed || !strings.Contains(st[0].LastError, "needs what host 0 lacks") {
		t.Fatalf("host 0's status of %s: %+v", name, st)
	}
	if n0, n1 := ms[0].host.Stats().LoadFailed, ms[1].host.Stats().LoadFailed; n0 != 0 || n1 != 0 {
		t.Fatalf("failed loads counted by hosts 0, 1: %d, %d; want none (the rule runs)", n0, n1)
	}
}

// The same content fails to load on both hosts: host 0, which owned it
// first, withdraws its version once host 1 offers the rule; host 1 takes
// it over, fails too, and keeps it (no other member offers it), its load
// error in its status. Over 20 more steps of each host nothing is taken
// over, handed over or withdrawn again.
func TestGroupTriesRuleThatFailsEverywhereOnEachHostOnce(t *testing.T) {
	_, ms, name := versionsCluster(t)
	failOnBothHosts(t, ms, name, "broken", "broken")
	settledOnHost1(t, ms, name)
	for i := range ms {
		st := ms[i].ruleStatus(name)
		if len(st) != 1 || st[0].State != StateLoadFailed || !strings.Contains(st[0].LastError, `no rule named "broken"`) {
			t.Fatalf("host %d's status: %+v", i, st)
		}
	}
	if gs, _ := ms[1].host.Group(); len(gs.Withdrawn) != 0 {
		t.Fatalf("host 1, the owner, withdrew %v", gs.Withdrawn)
	}
}

// Both versions fail: host 0 withdraws its own once, host 1 then owns the
// rule and keeps it (no other version is offered), and over 20 more steps
// nothing moves. Each host's status shows its own load error, and host 0
// the withdrawal.
func TestGroupSettlesWhenEveryVersionFails(t *testing.T) {
	_, ms, name := versionsCluster(t)
	failOnBothHosts(t, ms, name, "broken", "broken2")
	settledOnHost1(t, ms, name)
	for i, want := range []string{`"broken"`, `"broken2"`} {
		st := ms[i].ruleStatus(name)
		if len(st) != 1 || st[0].State != StateLoadFailed || !strings.Contains(st[0].LastError, want) {
			t.Fatalf("host %d's status: %+v", i, st)
		}
	}
	if gs, _ := ms[0].host.Group(); !slices.Equal(gs.Withdrawn, []string{name}) {
		t.Fatalf("host 0 withdrew %v", gs.Withdrawn)
	}
	if gs, _ := ms[1].host.Group(); len(gs.Withdrawn) != 0 {
		t.Fatalf("host 1 withdrew %v", gs.Withdrawn)
	}
}

// failOnBothHosts puts version v0 of rule name, which fails to load, on
// host 0 of ms, which owns the rule, then v1, which fails too, on host 1,
// which takes the rule over; and steps both hosts until each has seen the
// hand-over.
func failOnBothHosts(t *testing.T, ms []*member, name, v0, v1 string) {
	t.Helper()
	ms[0].put(t, name, v0)
	waitFor(t, "host 0 owns the rule, failed to load", func() bool { return ms[0].ownsFailed(name) })
	ms[1].put(t, name, v1)
	waitFor(t, "host 1 owns the rule, failed to load", func() bool {
		return ms[1].ownsFailed(name) && slices.Equal(owner(ms, name), []int{1})
	})
	steps(t, ms, 3)
}

// settledOnHost1 steps each host of ms 20 more times and checks that
// nothing is taken over, handed over or withdrawn any more, that host 1
// owns the rule name, and that the one withdrawal was host 0's.
func settledOnHost1(t *testing.T, ms []*member, name string) {
	t.Helper()
	before := groupCounts(ms)
	steps(t, ms, 20)
	if after := groupCounts(ms); after != before || !slices.Equal(owner(ms, name), []int{1}) {
		t.Fatalf("takeovers, handovers, withdrawals went from %v to %v; owner %v", before, after, owner(ms, name))
	}
	if before[2] != 1 {
		t.Fatalf("%d withdrawals, want 1 (host 0's)", before[2])
	}
}
