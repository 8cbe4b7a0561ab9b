package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// loadFailed returns m's count of failed loads (Stats.LoadFailed: what
// makes it not ready).
func (m *member) loadFailed() int { return m.host.Stats().LoadFailed }

// A withdrawn version does not make its host not ready: the rule runs on
// the member whose version loads, which is what the group arranged. Host
// 0, which owns the rule in a version that fails, counts one failed load
// until it withdraws it; then none, while Status still lists the version
// with its error and Stats counts it as withdrawn. When the other member
// leaves, host 0 offers its version again, owns the rule, and counts the
// failed load again: the rule runs nowhere. Before, host 0 counted the
// withdrawn version as failed throughout, and /readyz answered "1 rule
// file(s) failed to load" while the rule ran on host 1.
func TestGroupWithdrawnVersionIsReady(t *testing.T) {
	c, ms, name := versionsCluster(t)
	ms[0].put(t, name, "broken")
	waitFor(t, "host 0 owns the rule, failed to load", func() bool { return ms[0].ownsFailed(name) })
	if n := ms[0].loadFailed(); n != 1 {
		t.Fatalf("host 0 owns a rule that fails to load: %d failed loads, want 1", n)
	}
	ms[1].put(t, name, "good")
	runsOn(t, c, name, 1)
	if n := ms[0].loadFailed(); n != 0 {
		t.Fatalf("host 0 counts %d failed loads for its withdrawn version, want 0", n)
	}
	if hs := ms[0].host.Stats(); hs.Withdrawn != 1 {
		t.Fatalf("host 0 counts %d withdrawn, want 1", hs.Withdrawn)
	}
	if st := ms[0].ruleStatus(name); len(st) != 1 || st[0].State != StateLoadFailed || st[0].LastError == "" {
		t.Fatalf("host 0's status hides its withdrawn version: %+v", st)
	}
	if n := ms[1].loadFailed(); n != 0 {
		t.Fatalf("host 1, which runs the rule, counts %d failed loads", n)
	}

	ms[1].leave(t)
	waitFor(t, "host 0 owns the rule again, failed to load, and counts it", func() bool {
		return ms[0].ownsFailed(name) && ms[0].loadFailed() == 1
	})
}

// Content that fails on every member leaves the rule running nowhere: its
// owner is not ready. Host 0 loads it first (alone in offering it) and
// fails; host 1, which the assignment prefers, then offers the same
// content: host 0 withdraws its version (the load might fail on host 0
// only), host 1 takes the rule over, fails too, and keeps it (no other
// member offers it). The owner, host 1, counts the failed load; host 0
// lists its own failure in Status but does not count it: the rule is its
// owner's to run, and one member reporting it is enough. Before, host 0
// counted it too, and went on counting it when a third version that loads
// ran on another member.
func TestGroupFailedEverywhereMakesOwnerNotReady(t *testing.T) {
	c, ms := versionsHosts(t)
	name := preferred(ms, 1)
	failOnBothHosts(t, ms, name, "broken", "broken")
	if n0, n1 := ms[0].loadFailed(), ms[1].loadFailed(); n0 != 0 || n1 != 1 {
		t.Fatalf("failed loads counted by hosts 0, 1: %d, %d; want 0, 1 (the owner's)", n0, n1)
	}
	if st := ms[0].ruleStatus(name); len(st) != 1 || st[0].State != StateLoadFailed {
		t.Fatalf("host 0's status hides its failure: %+v", st)
	}
	if gs, _ := ms[1].host.Group(); len(gs.Withdrawn) != 0 {
		t.Fatalf("host 1, the owner, withdrew %v: no other member offers the rule", gs.Withdrawn)
	}

	// A third host brings a version that loads: host 1 withdraws its own
	// and the rule runs there; nobody counts a failed load.
	c.files = func(int) map[string]string { return map[string]string{name: "good"} }
	ms = append(ms, c.start())
	runsOn(t, c, name, 2)
	for _, m := range ms {
		if n := m.loadFailed(); n != 0 {
			t.Fatalf("host %d counts %d failed loads while the rule runs on host 2", m.i, n)
		}
	}
}

// Host 0's version is withdrawn, host 1's runs; host 1's file then changes
// to a third version, which fails to load: host 1 goes on running its
// previous version (a failed reload), and host 0's withdrawal holds
// (groupfailed.go: a withdrawal does not end merely because the other
// versions changed). Offering host 0's version again would let the
// assignment take the rule from host 1, which runs it, to host 0, where it
// failed; host 0 would withdraw it again, and host 1, taking the rule back,
// would load its new version, which fails: the rule would run nowhere.
// Over 20 more steps of each host nothing moves, the rule handles an event
// on host 1, and neither host counts a failed load.
func TestGroupWithdrawalHoldsWhenOtherVersionChanges(t *testing.T) {
	c, ms, name := versionsCluster(t)
	withdrawnOnHost0(t, c, ms, name)
	if err := os.WriteFile(filepath.Join(ms[1].dir, name), []byte("broken2"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ms[1].host.Load(ctx, filepath.Join(ms[1].dir, name)); err == nil {
		t.Fatal("host 1 loaded its third version")
	}
	if st := ms[1].ruleStatus(name); len(st) != 1 || st[0].State != StateReloadFailed {
		t.Fatalf("host 1's status after a failed reload: %+v", st)
	}
	steps(t, ms, 3) // host 0 has seen host 1's new set
	before := groupCounts(ms)
	steps(t, ms, 20)
	if after := groupCounts(ms); after != before || !slices.Equal(owner(ms, name), []int{1}) {
		t.Fatalf("takeovers, handovers, withdrawals went from %v to %v; owner %v", before, after, owner(ms, name))
	}
	if gs, _ := ms[0].host.Group(); !slices.Equal(gs.Withdrawn, []string{name}) || gs.Withdrawals != 1 {
		t.Fatalf("host 0's group status %+v, want %s withdrawn once", gs, name)
	}
	handles(t, c, "3", 1)
	if n0, n1 := ms[0].loadFailed(), ms[1].loadFailed(); n0 != 0 || n1 != 0 {
		t.Fatalf("failed loads counted by hosts 0, 1: %d, %d; want none (the rule runs)", n0, n1)
	}
}

// Every version fails, and the members change: host 0's version is
// withdrawn while host 1's runs; host 1 leaves and host 2 comes with a
// third version, which fails too. However the steps interleave (host 0
// may offer its version again between the two), the rule comes to rest
// owned by one host, failed to load, which counts it (not ready); the
// other has withdrawn its version and counts nothing.
func TestGroupEveryVersionFailingMakesOneHostNotReady(t *testing.T) {
	c, ms, name := versionsCluster(t)
	withdrawnOnHost0(t, c, ms, name)
	ms[1].leave(t)
	c.files = func(int) map[string]string { return map[string]string{name: "broken2"} }
	ms = []*member{ms[0], c.start()}
	waitFor(t, "one host owns the rule, failed to load, and the other withdrew its version", func() bool {
		own := owner(ms, name)
		if len(own) != 1 {
			return false
		}
		o, other := ms[0], ms[1]
		if own[0] == other.i {
			o, other = other, o
		}
		gs, _ := o.host.Group()
		ogs, _ := other.host.Group()
		return o.ownsFailed(name) && len(gs.Withdrawn) == 0 && slices.Equal(ogs.Withdrawn, []string{name})
	})
	steps(t, ms, 3)
	for _, m := range ms {
		want := 0
		if slices.Equal(owner(ms, name), []int{m.i}) {
			want = 1
		}
		if n := m.loadFailed(); n != want {
			t.Fatalf("host %d (owners %v) counts %d failed loads, want %d", m.i, owner(ms, name), n, want)
		}
	}
}
