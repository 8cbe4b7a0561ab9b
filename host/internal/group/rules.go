package group

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/protocol"
)

// Which rules each member of a group has (membership's groupsets.go has
// the stored forms): this host's set, kept as its shared rule files change; the
// other members' sets, read once per digest; and what is warned about
// once (roster lines that name no member, rules whose versions differ).

func (g *Group) setKey(digest string) string { return g.key("rules/" + digest) }

// ownSet returns this host's set, with its digest and stored form: the
// shared rule files it has now, but for the versions it withdrew
// (membership.Withdrawals).
func (g *Group) ownSet() (membership.RuleSet, string, []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mine == nil {
		s := make(membership.RuleSet, len(g.hashes))
		for name, h := range g.hashes {
			if g.withdrawn.Offers(name, h) {
				s[name] = h
			}
		}
		d, v := s.Encode()
		g.mine = &membership.StoredSet{Set: s, Digest: d, Value: v}
	}
	return g.mine.Set, g.mine.Digest, g.mine.Value
}

// setOf returns the set named digest: from memory, or read from the store
// (once: a set's content cannot change under its digest). A set missing or
// unreadable is reported (once per digest) and returned as nil: its
// members are given no rule until it is readable. Only a failed read is an
// error.
func (g *Group) setOf(ctx context.Context, digest string) (membership.RuleSet, error) {
	g.mu.Lock()
	s, ok := g.sets[digest]
	g.mu.Unlock()
	if ok {
		return s, nil
	}
	res, err := g.store.Get(ctx, []byte(g.setKey(digest)), protocol.CallOptions{})
	if err != nil {
		return nil, fmt.Errorf("read rule set %s: %w", digest, err)
	}
	if !res.Found {
		err = errors.New("no such key")
	} else if s, err = membership.DecodeRuleSet(digest, res.Value); err == nil {
		g.mu.Lock()
		g.sets[digest] = s
		g.mu.Unlock()
		return s, nil
	}
	if g.warnOnce("set " + digest) {
		g.log.Warn("group: a member's rule set is unreadable; it is given no rule until it is", "group", g.name,
			"key", g.setKey(digest), "err", err)
	}
	return nil, nil
}

// memberSets returns the rule set of each live member (nil for one whose
// set is unreadable), this host's (and any with the same digest) being
// mine, and forgets the sets no live member has.
func (g *Group) memberSets(ctx context.Context, live []membership.RosterEntry, mine membership.RuleSet, digest string) (map[string]membership.RuleSet, error) {
	out := make(map[string]membership.RuleSet, len(live))
	used := map[string]bool{}
	for _, e := range live {
		if e.ID == g.id || e.Digest == digest {
			out[e.ID] = mine
			continue
		}
		s, err := g.setOf(ctx, e.Digest)
		if err != nil {
			return nil, err
		}
		out[e.ID] = s
		used[e.Digest] = true
	}
	g.mu.Lock()
	for d := range g.sets {
		if !used[d] {
			delete(g.sets, d)
		}
	}
	g.mu.Unlock()
	return out, nil
}

// warnOnce reports whether what was not warned about yet, and notes it.
// The notes are bounded: past maxWarned they start over.
func (g *Group) warnOnce(what string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.warned[what] {
		return false
	}
	if len(g.warned) >= maxWarned {
		clear(g.warned)
	}
	g.warned[what] = true
	return true
}

const maxWarned = 1024

// maxBadLines bounds the roster lines that name no member warned about one
// by one: past it the roster is none a host wrote.
const maxBadLines = 8

// warnBadLines reports each roster line that names no member, once; a
// roster with more than maxBadLines of them is reported once as a whole
// (its count and first lines): warned about line by line, a roster of
// thousands of bad lines would run through the notes (maxWarned) and be
// warned about again at every step.
func (g *Group) warnBadLines(bad []membership.BadLine) {
	short := func(line string) string {
		if len(line) > 200 {
			return line[:200] + "..."
		}
		return line
	}
	if len(bad) > maxBadLines {
		h := sha256.New()
		first := make([]string, 0, maxBadLines)
		for i, b := range bad {
			h.Write([]byte(b.Line + "\n"))
			if i < maxBadLines {
				first = append(first, short(b.Line)+" ("+b.Why+")")
			}
		}
		if g.warnOnce("lines " + hex.EncodeToString(h.Sum(nil))) {
			g.log.Warn("group: roster lines ignored: no host wrote them", "group", g.name, "key", g.key("roster"),
				"lines", len(bad), "first", first)
		}
		return
	}
	for _, b := range bad {
		if g.warnOnce("line " + b.Line) {
			g.log.Warn("group: roster line ignored", "group", g.name, "key", g.key("roster"), "line", short(b.Line), "why", b.Why)
		}
	}
}

// warnDiffering reports, once per rule and set of versions, a rule whose
// content differs between the live members (of sets): each runs its own
// version when it owns the rule. The sets are compared again only when
// the members' digests changed.
func (g *Group) warnDiffering(live []membership.RosterEntry, sets map[string]membership.RuleSet) {
	var key strings.Builder
	for _, e := range live {
		key.WriteString(e.Digest)
		if sets[e.ID] == nil {
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
		g.log.Warn("group: the hosts have different versions of a rule; the one that owns it runs its own",
			"group", g.name, "rule", name, "versions", strings.Join(versions, "; "))
	}
}
