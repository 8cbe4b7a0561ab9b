package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// Two hosts of a group have different rule folders: r00-r03 on both (r00
// in another version on host 1), r04-r09 only on host 0, r10-r15 only on
// host 1. Every rule runs, on a host that has it, 8 on each; r00 runs in
// the version its owner has. The roster names each host's rule set, stored
// once. A rule file added to host 1 (r09) is in its new set, the set it
// replaced is deleted, and when host 0 is cut off, r09 moves to host 1.
// Before, each host assigned its own files among all the members: a rule
// assigned to a host without it was never run (here, at least two of
// host 0's own).
func TestGroupAssignsRulesOnlyToHostsThatHaveThem(t *testing.T) {
	c := newCluster(t, 16, groupTestTTL)
	var v2 atomic.Int64 // events r00's version 2 handled
	c.custom = map[string]func(int) goRule{"r00-v2": func(i int) goRule {
		h := c.handler(i, "r00")
		return goRule{init: watchInit("in/r00"), handle: func(ctx context.Context, host abi.Host, ev abi.Event) error {
			v2.Add(1)
			return h(ctx, host, ev)
		}}
	}}
	c.files = func(i int) map[string]string {
		fs := map[string]string{}
		for n := range 16 {
			name := fmt.Sprintf("r%02d", n)
			if n < 4 || (i == 0) == (n < 10) {
				fs[name+".gorule"] = name
			}
		}
		if i == 1 {
			fs["r00.gorule"] = "r00-v2"
		}
		return fs
	}
	ms := []*member{c.start(), c.start()}
	waitFor(t, "16 rules owned, 8 by each host", func() bool { return c.settled(8) })
	own := c.owners()
	for r, hosts := range own {
		n := 0
		fmt.Sscanf(r, "r%d", &n)
		if i := hosts[0]; n >= 4 && (i == 0) != (n < 10) {
			t.Fatalf("rule %s owned by host %d, which does not have it", r, i)
		}
	}
	c.drive(1, time.Minute, nil)
	if by1 := own["r00"][0] == 1; by1 != (v2.Load() > 0) {
		t.Fatalf("r00 owned by host %d, and its version 2 handled %d events", own["r00"][0], v2.Load())
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	digests := c.rosterDigests(ctx)
	if len(digests) != 2 || digests[ms[0].client.ClientID()] == digests[ms[1].client.ClientID()] {
		t.Fatalf("roster digests %v, want one per host, different", digests)
	}
	for id, d := range digests {
		res, err := c.user.Get(ctx, []byte("$ssrun/group/g/rules/"+d), protocol.CallOptions{})
		if err != nil || !res.Found {
			t.Fatalf("the rule set of %s (%s): %v %v", id, d, res.Found, err)
		}
	}
	id1, old := ms[1].client.ClientID(), digests[ms[1].client.ClientID()]
	dir1 := filepath.Dir(ms[1].host.Status()[0].Path)
	p := filepath.Join(dir1, "r09.gorule")
	if err := os.WriteFile(p, []byte("r09"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ms[1].host.Load(ctx, p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "host 1's new rule set in the roster", func() bool {
		d := c.rosterDigests(ctx)[id1]
		return d != "" && d != old
	})
	waitFor(t, "the rule set host 1 had before deleted", func() bool { // after the roster's write
		res, err := c.user.Get(ctx, []byte("$ssrun/group/g/rules/"+old), protocol.CallOptions{})
		return err == nil && !res.Found
	})
	ms[0].proxy.Cut()
	waitFor(t, "r00-r03 and r09 owned by host 1", func() bool {
		own := c.owners(ms[0])
		for _, r := range []string{"r00", "r01", "r02", "r03", "r09"} {
			if !slices.Equal(own[r], []int{1}) {
				return false
			}
		}
		return true
	})
}

// rosterDigests reads the group's roster: member id -> rule set digest.
func (c *cluster) rosterDigests(ctx context.Context) map[string]string {
	c.t.Helper()
	res, err := c.user.Get(ctx, []byte("$ssrun/group/g/roster"), protocol.CallOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(string(res.Value), "\n") {
		if id, d, ok := strings.Cut(line, " "); ok {
			out[id] = d
		}
	}
	return out
}
