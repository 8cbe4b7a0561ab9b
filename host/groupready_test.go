package host

import (
	"context"
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

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ms[1].host.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "host 0 owns the rule again, failed to load, and counts it", func() bool {
		return ms[0].ownsFailed(name) && ms[0].loadFailed() == 1
	})
}

// A version that fails and is not withdrawn, every member having the same
// content, leaves the rule running nowhere: its owner is not ready. Host 0
// loads it first (alone in offering it) and fails; host 1, which the
// assignment prefers, then offers the same content, takes the rule over and
// fails too. The owner, host 1, counts the failed load; host 0, which
// handed the rule over, lists its own failure in Status but does not count
// it: the rule is its owner's to run, and one member reporting it is
// enough. Before, host 0 counted it too, and went on counting it when a
// third version that loads ran on another member.
func TestGroupFailedEverywhereMakesOwnerNotReady(t *testing.T) {
	c, ms := versionsHosts(t)
	name := preferred(ms, 1)
	ms[0].put(t, name, "broken")
	waitFor(t, "host 0 owns the rule, failed to load", func() bool { return ms[0].ownsFailed(name) })
	ms[1].put(t, name, "broken")
	waitFor(t, "host 1 owns the rule, failed to load", func() bool {
		return ms[1].ownsFailed(name) && slices.Equal(owner(ms, name), []int{1})
	})
	steps(t, ms, 3) // both have seen the hand-over
	if n0, n1 := ms[0].loadFailed(), ms[1].loadFailed(); n0 != 0 || n1 != 1 {
		t.Fatalf("failed loads counted by hosts 0, 1: %d, %d; want 0, 1 (the owner's)", n0, n1)
	}
	if st := ms[0].ruleStatus(name); len(st) != 1 || st[0].State != StateLoadFailed {
		t.Fatalf("host 0's status hides its failure: %+v", st)
	}
	if gs, _ := ms[0].host.Group(); len(gs.Withdrawn) != 0 {
		t.Fatalf("host 0 withdrew %v: every member has its content", gs.Withdrawn)
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
