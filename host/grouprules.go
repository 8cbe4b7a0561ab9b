package host

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The roster's lines (group.go): "ID DIGEST", one member a line, where ID
// is the member's client id and DIGEST names the set of shared rule files
// it has (groupsets.go). Hosts of a group may differ in their rule files:
// a rule is assigned only among the live members whose set has it
// (assignAmong), and a rule whose content differs between hosts runs, on
// whichever host owns it, in that host's version.
//
// The roster is a key any client of the store may write: a line that does
// not parse (an older ssrun's "ID" alone, or anything else) is ignored,
// with a warning once per line, and dropped at the next edit of the roster.

// rosterEntry is one member's line.
type rosterEntry struct{ id, digest string }

// maxMemberID bounds a member id (an MQTT client id) in the roster.
const maxMemberID = 1024

// parseRoster returns the roster's members, sorted by id, and its lines
// that are not members, each with why. A member listed twice keeps its
// first line.
func parseRoster(b []byte) (entries []rosterEntry, bad []badLine) {
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		why := ""
		switch {
		case len(f) == 1:
			why = "no rule set digest (a host of an older ssrun? every host of a group must run the same version)"
		case len(f) != 2:
			why = "want \"ID DIGEST\""
		case !validMemberID(f[0]):
			why = "not a member id"
		case !validDigest(f[1]):
			why = fmt.Sprintf("not a rule set digest (%d hex digits)", digestLen)
		case seen[f[0]]:
			why = "the member is listed twice"
		}
		if why != "" {
			bad = append(bad, badLine{line: line, why: why})
			continue
		}
		seen[f[0]] = true
		entries = append(entries, rosterEntry{id: f[0], digest: f[1]})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].id < entries[j].id })
	return entries, bad
}

// badLine is a roster line that names no member, and why.
type badLine struct{ line, why string }

// validMemberID reports whether id can be a member's: printable UTF-8, at
// most maxMemberID bytes (no white space: the fields are split on it).
func validMemberID(id string) bool {
	if id == "" || len(id) > maxMemberID || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// formatRoster writes entries (sorted, one line per member) as the
// roster's value.
func formatRoster(entries []rosterEntry) []byte {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.id)
		b.WriteByte(' ')
		b.WriteString(e.digest)
	}
	return []byte(b.String())
}

// withEntry returns entries with id's line replaced by (or, if absent,
// added as) e, sorted.
func withEntry(entries []rosterEntry, e rosterEntry) []rosterEntry {
	out := slices.DeleteFunc(slices.Clone(entries), func(x rosterEntry) bool { return x.id == e.id })
	out = append(out, e)
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// entryOf returns id's line in entries.
func entryOf(entries []rosterEntry, id string) (rosterEntry, bool) {
	for _, e := range entries {
		if e.id == id {
			return e, true
		}
	}
	return rosterEntry{}, false
}

// warnBadLines reports each roster line that names no member, once.
func (g *group) warnBadLines(bad []badLine) {
	for _, b := range bad {
		if g.warnOnce("line " + b.line) {
			line := b.line
			if len(line) > 200 {
				line = line[:200] + "..."
			}
			g.svc.log.Warn("group: roster line ignored", "group", g.name, "line", line, "why", b.why)
		}
	}
}

// warnDiffering reports, once per rule and set of versions, a rule whose
// content differs between the live members (of sets): each runs its own
// version when it owns the rule. The sets are compared again only when
// the members' digests changed.
func (g *group) warnDiffering(live []rosterEntry, sets map[string]ruleSet) {
	var key strings.Builder
	for _, e := range live {
		key.WriteString(e.digest)
		if sets[e.id] == nil {
			key.WriteByte('-')
		}
		key.WriteByte(' ')
	}
	g.mu.Lock()
	same := g.compared == key.String()
	g.compared = key.String()
	g.mu.Unlock()
	if same {
		return
	}
	hosts := map[string]map[string][]string{} // rule -> content hash -> members
	for id, s := range sets {
		for name, h := range s {
			if h == "" {
				continue
			}
			if hosts[name] == nil {
				hosts[name] = map[string][]string{}
			}
			hosts[name][h] = append(hosts[name][h], id)
		}
	}
	for name, byHash := range hosts {
		if len(byHash) < 2 {
			continue
		}
		hashes := make([]string, 0, len(byHash))
		for h := range byHash {
			hashes = append(hashes, h)
			sort.Strings(byHash[h])
		}
		sort.Strings(hashes)
		if !g.warnOnce("differs " + name + " " + strings.Join(hashes, " ")) {
			continue
		}
		versions := make([]string, 0, len(hashes))
		for _, h := range hashes {
			versions = append(versions, h+": "+strings.Join(byHash[h], ","))
		}
		g.svc.log.Warn("group: the hosts have different versions of a rule; the one that owns it runs its own",
			"group", g.name, "rule", name, "versions", strings.Join(versions, "; "))
	}
}
