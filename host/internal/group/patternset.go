package group

import "github.com/ssrun/ssrun/host/internal/patterns"

// patternSet is one member's published patterns, indexed by their literal
// prefixes. Every write of a rule is matched against every other member's
// set (Doorbells), under the hints' lock: a key is matched only against
// the patterns whose literal prefix begins it, a map lookup per length up
// to the longest prefix, instead of a glob match per pattern.
type patternSet struct {
	list     []patterns.Pattern            // as published, in order
	byPrefix map[string][]patterns.Pattern // by literal prefix ("" for a pattern that starts with a wildcard)
	longest  int                           // the longest literal prefix, in bytes
}

// newPatternSet indexes ps; nil ps gives an empty set.
func newPatternSet(ps []patterns.Pattern) *patternSet {
	s := &patternSet{list: ps, byPrefix: make(map[string][]patterns.Pattern)}
	for _, p := range ps {
		pre := p.Prefix()
		s.byPrefix[pre] = append(s.byPrefix[pre], p)
		s.longest = max(s.longest, len(pre))
	}
	return s
}

// match reports whether a pattern of s matches key.
func (s *patternSet) match(key string) bool {
	for n := range min(len(key), s.longest) + 1 {
		for _, p := range s.byPrefix[key[:n]] {
			if p.Match(key) {
				return true
			}
		}
	}
	return false
}
