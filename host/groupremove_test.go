package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// A standby rule's file (one another host of the group runs) deleted on a
// host leaves that host's rule set when the folder's change is seen, as a
// running rule's does: the roster names the new set, and when the owner
// goes, the rule is not assigned to the host that no longer has it (it
// would fail to load there and run nowhere).
func TestGroupStandbyFileDeleted(t *testing.T) {
	c := newCluster(t, 4, groupTestTTL)
	c.files = func(int) map[string]string {
		fs := map[string]string{}
		for _, r := range c.rules {
			fs[r+".gorule"] = r
		}
		return fs
	}
	ms := []*member{c.start(), c.start()}
	waitFor(t, "4 rules owned, 2 by each host", func() bool { return c.settled(2) })
	own := c.owners()
	var victim string
	for _, r := range c.rules {
		if slices.Equal(own[r], []int{0}) {
			victim = r
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	id1 := ms[1].client.ClientID()
	old := c.rosterDigests(ctx)[id1]
	p := filepath.Join(filepath.Dir(ms[1].host.Status()[0].Path), victim+".gorule")
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	ms[1].host.reconcile(ctx, p) // what Watch does when it sees the file go
	waitFor(t, "host 1's rule set without "+victim+" in the roster", func() bool {
		d := c.rosterDigests(ctx)[id1]
		return d != "" && d != old
	})
	ms[0].proxy.Cut()
	waitFor(t, "host 1 owning the 3 rules it has", func() bool {
		own := c.owners(ms[0])
		for _, r := range c.rules {
			if r != victim && !slices.Equal(own[r], []int{1}) {
				return false
			}
		}
		return true
	})
	if gs, _ := ms[1].host.Group(); slices.Contains(gs.Owned, victim+".gorule") {
		t.Fatalf("host 1 owns %s, whose file it no longer has (owned: %v)", victim, gs.Owned)
	}
}
