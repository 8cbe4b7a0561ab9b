package host

import (
	"slices"
	"strings"
)

// The versions of shared rules a host of a group withdrew from the set it
// offers (group.go) because they fail to load there while another member
// has another version.
//
// An owned rule whose load failed stays owned by the host that failed to
// load it, its failure in Status, when every live member that has the rule
// has the same content: it would fail on any of them. When another live
// member has another version (another content hash), that version may
// load: the host withdraws its own version from the set it publishes (its
// roster line names the new set), hands the rule over, and the assignment
// moves the rule to a member that still offers it. The withdrawal holds
// while the reason for it holds: it ends, and the host offers its version
// again, when its file changes (another hash), or when the other members'
// versions of the rule change (one with another version leaves, withdraws
// its own, or changes it). So a host withdraws a version at most once per
// set of other versions, and a rule is never withdrawn everywhere: a host
// withdraws only while another member offers another version, and when
// that member withdraws too, the first one's reason no longer holds. When
// every version fails, the rule comes to rest owned by a host that sees no
// other version offered: it runs nowhere, that host's Status shows its
// load error, and the others' list their own failure and the withdrawal
// (GroupStatus.Withdrawn).

// withdrawals maps the name of each rule whose version this host withdrew
// to the withdrawal.
type withdrawals map[string]withdrawal

// withdrawal is one version withdrawn, and why.
type withdrawal struct {
	hash   string // the content hash of this host's version
	others string // the other members' versions then (otherVersions)
	err    string // the error of its load
}

// failedLoad is a rule this host owns whose version (content hash) failed
// to load, nothing of it running, with the load's error.
type failedLoad struct{ rule, hash, err string }

// versionChange is a withdrawal made or ended by review: its rule, the version
// (content hash), and why, for the log.
type versionChange struct {
	rule, hash string
	// withdrawn is set for a new withdrawal, false for one that ended.
	withdrawn bool
	why       string
	err       string // a withdrawn version's load error
}

// offers reports whether this host offers its version hash of rule (it
// did not withdraw it).
func (w withdrawals) offers(rule, hash string) bool {
	x, ok := w[rule]
	return !ok || x.hash != hash
}

// review brings the withdrawals in line with the live members' rule sets
// (sets, by member id; self is this host), this host's content hashes
// (hashes: rule name -> hash, as its files are now) and the owned rules
// whose version failed to load (failed). It ends the withdrawals whose
// reason no longer holds, then withdraws each failed rule some other
// member has in another version, and returns what changed.
func (w withdrawals) review(self string, sets map[string]ruleSet, hashes map[string]string, failed []failedLoad) []versionChange {
	var out []versionChange
	for _, rule := range sortedKeys(w) {
		x := w[rule]
		h, ok := hashes[rule]
		switch {
		case !ok || h != x.hash:
			delete(w, rule)
			out = append(out, versionChange{rule: rule, hash: x.hash, why: "its file changed"})
		case otherVersions(self, rule, x.hash, sets) != x.others:
			delete(w, rule)
			out = append(out, versionChange{rule: rule, hash: x.hash, why: "the other members' versions changed"})
		}
	}
	for _, f := range failed {
		if h, ok := hashes[f.rule]; !ok || h != f.hash {
			continue // the file changed since: its next load decides
		}
		if _, ok := w[f.rule]; ok {
			continue
		}
		others := otherVersions(self, f.rule, f.hash, sets)
		if others == "" {
			continue // it would fail on any member that has it
		}
		w[f.rule] = withdrawal{hash: f.hash, others: others, err: f.err}
		out = append(out, versionChange{rule: f.rule, hash: f.hash, withdrawn: true, err: f.err,
			why: "members " + strings.Join(holders(self, f.rule, f.hash, sets), ",") + " have another version"})
	}
	return out
}

// otherVersions returns the versions (content hashes) of rule other than
// own that the members other than self offer, sorted and joined by spaces:
// "" when there is none. A version whose file could not be read ("") is
// none: it cannot load either.
func otherVersions(self, rule, own string, sets map[string]ruleSet) string {
	var vs []string
	for id, s := range sets {
		if h, ok := s[rule]; ok && id != self && h != "" && h != own && !slices.Contains(vs, h) {
			vs = append(vs, h)
		}
	}
	slices.Sort(vs)
	return strings.Join(vs, " ")
}

// holders returns the members other than self that offer a version of
// rule other than own, sorted.
func holders(self, rule, own string, sets map[string]ruleSet) []string {
	var ids []string
	for id, s := range sets {
		if h, ok := s[rule]; ok && id != self && h != "" && h != own {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// sortedKeys returns the keys of m, sorted.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
