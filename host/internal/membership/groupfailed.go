package membership

import (
	"maps"
	"slices"
	"strings"
)

// The versions of shared rules a host of a group withdrew from the set it
// offers (host/internal/group) because they fail to load there while
// another member offers the rule.
//
// A load may fail on one host and not on another with the same content: a
// plugin whose binary needs what that host lacks, an initialisation that
// runs past its deadline on a slower or busier host, or a store call of
// the initialisation refused there. So an owned rule whose load failed is
// not kept where it failed while another live member offers the rule, in
// any version (another content hash, or the same): the host withdraws its
// own version from the set it publishes (its roster line names the new
// set), hands the rule over, and the assignment moves the rule to a member
// that still offers it. The withdrawal holds while its reason holds, that
// some other live member offers the rule: it ends, and the host offers its
// version again, when its file changes (another hash), or when no other
// member offers the rule any more (those that had it left or withdrew
// theirs). So a rule is never withdrawn everywhere: a host withdraws only
// while another member offers the rule, and when that member stops
// offering it, the first one's reason no longer holds. A rule that fails
// on every member comes to rest owned by the member that sees no other
// offer (each member that had it tried it once, and withdrew): it runs
// nowhere, that host's Status shows its load error, and the others list
// their own failure and the withdrawal (GroupStatus.Withdrawn). The cost
// of a content that fails everywhere (a syntax error) is one load on each
// member that has it, once per change of the members or their files.
// Before, a member withdrew only while another offered another version,
// and a rule whose same content failed on its owner alone stayed there,
// running nowhere, though another member could run it
// (TestGroupMovesRuleThatFailsOnlyOnItsOwner).
//
// A withdrawal does not end merely because the other offers changed (one of
// several withdrawn, or replaced by another version): with three or more
// versions that all fail, ending it then lets the members withdraw and
// offer again in turn, each withdrawal changing the others' offers
// (TestWithdrawalsSettle, a model of the members' steps, found a member
// withdrawing 5 times with no change of members or files). As it is, a
// member offers its version again only when no other member offers the
// rule: between two changes of the members or their files, each member
// withdraws at most once, and the ownership settles (the model checks
// both, over every assignment of three versions to up to four members and
// every member on which they all fail).
//
// Nor does it end when the version it gave way to is replaced: say host A
// withdrew v1 for host B's v2, and B's file changes to v3, which fails
// too. Offering v1 again is no way to make the rule run: v1 failed on A,
// and the host holds a failed load to be its content's (a file that
// failed is loaded again when it changes, in a group or not, and here
// that ends the withdrawal anyway); the version a withdrawal names is one
// known to fail. It can stop the rule, though: B, whose reload of
// v3 failed, goes on running v2, and v1 offered again lets the assignment
// move the rule to A, which fails, withdraws v1 again, and hands the rule
// back to B, which now loads v3 and runs nothing
// (TestWithdrawalHoldsWhileOwnerRunsPrevious). Ending a withdrawal once no
// version offered when it was made is offered any more also lets a member
// withdraw twice with nothing changed (TestWithdrawalsSettle finds it).
// At rest, a rule that runs nowhere is owned by a member that sees no
// other offer, so has not withdrawn its own: it counts the failure (not
// ready: host/internal/group/ready.go; the model checks this too).

// Withdrawals maps the name of each rule whose version this host withdrew
// to the withdrawal.
type Withdrawals map[string]withdrawal

// withdrawal is one version withdrawn, and why.
type withdrawal struct {
	hash string // the content hash of this host's version
	err  string // the error of its load
}

// FailedLoad is a rule this host owns whose version (content hash) failed
// to load, nothing of it running, with the load's error.
type FailedLoad struct{ Rule, Hash, Err string }

// VersionChange is a withdrawal made or ended by review: its rule, the
// version (content hash), and why, for the log.
type VersionChange struct {
	Rule, Hash string
	// Withdrawn is set for a new withdrawal, false for one that ended.
	Withdrawn bool
	Why       string
	Err       string // a withdrawn version's load error
}

// Offers reports whether this host offers its version hash of rule (it
// did not withdraw it).
func (w Withdrawals) Offers(rule, hash string) bool {
	x, ok := w[rule]
	return !ok || x.hash != hash
}

// Review brings the withdrawals in line with the live members' rule sets
// (sets, by member id; self is this host), this host's content hashes
// (hashes: rule name -> hash, as its files are now) and the owned rules
// whose version failed to load (failed). It ends the withdrawals whose
// reason no longer holds, then withdraws each failed rule another member
// offers, in any version, and returns what changed.
func (w Withdrawals) Review(self string, sets map[string]RuleSet, hashes map[string]string, failed []FailedLoad) []VersionChange {
	var out []VersionChange
	for _, rule := range slices.Sorted(maps.Keys(w)) {
		x := w[rule]
		h, ok := hashes[rule]
		switch {
		case !ok || h != x.hash:
			delete(w, rule)
			out = append(out, VersionChange{Rule: rule, Hash: x.hash, Why: "its file changed"})
		case !offeredElsewhere(self, rule, sets):
			delete(w, rule)
			out = append(out, VersionChange{Rule: rule, Hash: x.hash, Why: "no other member offers the rule"})
		}
	}
	for _, f := range failed {
		if h, ok := hashes[f.Rule]; !ok || h != f.Hash {
			continue // the file changed since: its next load decides
		}
		if _, ok := w[f.Rule]; ok {
			continue
		}
		offer := holders(self, f.Rule, sets)
		if len(offer) == 0 {
			continue // no other member to try it: it stays here, its failure shown
		}
		w[f.Rule] = withdrawal{hash: f.Hash, err: f.Err}
		out = append(out, VersionChange{Rule: f.Rule, Hash: f.Hash, Withdrawn: true, Err: f.Err,
			Why: "members " + strings.Join(offer, ",") + " offer the rule"})
	}
	return out
}

// offeredElsewhere reports whether a member other than self offers a
// version of rule, whichever (its own content hash or another). A version
// whose file could not be read ("") is none: it cannot load.
func offeredElsewhere(self, rule string, sets map[string]RuleSet) bool {
	return len(holders(self, rule, sets)) > 0
}

// holders returns the members other than self that offer a version of
// rule (not ""), sorted.
func holders(self, rule string, sets map[string]RuleSet) []string {
	var ids []string
	for id, s := range sets {
		if h, ok := s[rule]; ok && id != self && h != "" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
