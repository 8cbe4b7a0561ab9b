package group

import (
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/host/internal/patterns"
)

// matchEach is what a patternSet stands for: a match by any of ps.
func matchEach(ps []patterns.Pattern, key string) bool {
	return slices.ContainsFunc(ps, func(p patterns.Pattern) bool { return p.Match(key) })
}

// compileLines compiles the lines of src that compile.
func compileLines(src string) []patterns.Pattern {
	var ps []patterns.Pattern
	for line := range strings.SplitSeq(src, "\n") {
		if p, err := patterns.Compile(line); err == nil {
			ps = append(ps, p)
		}
	}
	return ps
}

// The index matches a key as matching it against each pattern would:
// wildcards first or late, classes, escapes, a key shorter than a prefix.
func TestPatternSetMatchesAsEachPattern(t *testing.T) {
	ps := compileLines("site/1/dev/*\nsite/1/dev/7/t\nsite/[23]/x\n*/alarm\nab?d\na\\*b*\nsite/1/d\nexact")
	s := newPatternSet(ps)
	for _, key := range []string{"site/1/dev/7", "site/1/dev/7/t", "site/2/x", "site/4/x", "z/alarm", "alarm", "abcd", "abd",
		"a*bc", "axbc", "site/1/d", "site/1/", "", "exact", "exactly", "s"} {
		if got, want := s.match(key), matchEach(ps, key); got != want {
			t.Errorf("match(%q) = %v, each pattern: %v", key, got, want)
		}
	}
	if newPatternSet(nil).match("k") {
		t.Error("an empty set matched")
	}
}

func FuzzPatternSet(f *testing.F) {
	f.Add("site/1/dev/*\n*/alarm\na\\*b*\n[ab]c", "site/1/dev/9")
	f.Add("a\\*b*\n", "a*bc")
	f.Add("\\[x]*\n?", "[x]y")
	f.Fuzz(func(t *testing.T, src, key string) {
		ps := compileLines(src)
		if got, want := newPatternSet(ps).match(key), matchEach(ps, key); got != want {
			t.Fatalf("patterns %q, key %q: index %v, each pattern %v", src, key, got, want)
		}
	})
}
