package group

import "path/filepath"

// Which failed loads of a group's shared rules make a member not ready.
//
// Readiness (host.Stats.LoadFailed, admin.RulesReady) says that a rule this
// host is to run does not run. In a group, a shared rule is its owner's to
// run: the member the assignment gives it to, among those that offer it. So
// a member counts the failed load of a shared rule only while it owns the
// rule and has not withdrawn its version (membership's groupfailed.go):
//
//   - A version withdrawn fails here while another member offers the rule,
//     to which the rule moves: what the group arranged, not a fault of
//     this host. host.Stats.Withdrawn counts it instead, and Status lists it,
//     failed to load, with its error.
//   - A failed version the host handed over before it could withdraw it
//     (the assignment preferring a member that offers the rule too) is
//     that member's to run: should it fail there too, the new owner counts
//     it (one member reporting the rule is enough); should it load there,
//     there is nothing left to report. Status lists it here too.
//
// A rule that fails on every member still makes a member not ready: it
// comes to rest owned by a member that sees no other offer, which does not
// withdraw its own (membership's groupfailed.go), and counts it. Nothing is
// lost either: every failure stays in its host's Status, with its error,
// until the file changes or loads.

// Excuses reports whether the failed load of the rule file at path is not
// this host's to count (see above): the group shares it, and this host does
// not own it or has withdrawn its version.
func (g *Group) Excuses(path string) bool {
	name := filepath.Base(path)
	g.mu.Lock()
	defer g.mu.Unlock()
	if p, ok := g.paths[name]; !ok || p != path {
		return false // not a rule file the group shares
	}
	_, withdrawn := g.withdrawn[name]
	return withdrawn || !g.owned[name]
}
