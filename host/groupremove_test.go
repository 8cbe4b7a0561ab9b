package host

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
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

// A rule set whose roster write is refused is deleted at the next edit of
// the roster that does not name it (the store cannot list keys: nothing
// else would find it). A client poisons the roster with a fencing token 30 s
// ahead, so every member's roster write is refused; the member's set
// changes twice meanwhile (a file added, then another), each set stored
// with no line naming it; the client then deletes the roster, the member
// writes its line again, naming the last set, and the first is gone from
// the store. Before, it stayed there for good.
func TestGroupDeletesRuleSetItsRosterWriteMissed(t *testing.T) {
	c := newCluster(t, 0, groupTestTTL)
	c.custom = map[string]func(int) goRule{"good": func(i int) goRule { return goRule{init: watchInit("in/x"), handle: c.handler(i, "x")} }}
	c.files = func(int) map[string]string { return nil }
	m := c.start()
	id := m.client.ClientID()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	digest := m.host.group.Digest
	stored := func(d string) bool {
		res, err := c.user.Get(ctx, []byte("$ssrun/group/g/rules/"+d), protocol.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return res.Found
	}
	waitFor(t, "the member's line in the roster", func() bool { return c.rosterDigests(ctx)[id] == digest() })

	roster, err := c.user.Get(ctx, []byte("$ssrun/group/g/roster"), protocol.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	poison := hlc.HLC{Wall: time.Now().Add(30 * time.Second).UnixMilli(), Node: "poison"}
	if _, err := c.user.Set(ctx, []byte("$ssrun/group/g/roster"), roster.Value, protocol.SetOptions{FencingToken: poison}); err != nil {
		t.Fatal(err)
	}
	m.put(t, "a.gorule", "good")
	first := digest()
	waitFor(t, "the first new set stored", func() bool { return stored(first) })
	m.put(t, "b.gorule", "good")
	last := digest()
	waitFor(t, "the second new set stored", func() bool { return stored(last) })
	if d := c.rosterDigests(ctx)[id]; d == first || d == last {
		t.Fatalf("the poisoned roster names %s", d)
	}

	if _, err := c.user.Del(ctx, []byte("$ssrun/group/g/roster"), protocol.DelOptions{FencingToken: poison}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the roster names the member's last set", func() bool { return c.rosterDigests(ctx)[id] == last })
	// deleted after the roster's write, in the same edit
	waitFor(t, "the set no roster named deleted", func() bool { return !stored(first) })
	if !stored(last) {
		t.Fatalf("the named set %s is gone", last)
	}
}
