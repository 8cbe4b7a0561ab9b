package group

import (
	"slices"
	"strings"
	"testing"
)

// A member's published patterns are hostile input to the others: lines
// that do not compile are left out, the rest kept.
func TestParsePatternLinesLeavesOutBadLines(t *testing.T) {
	got := parsePatternLines([]byte("a/*\n[\n\n" + strings.Repeat("*", 70<<10) + "\nb/?"))
	var srcs []string
	for _, p := range got {
		srcs = append(srcs, p.Src)
	}
	if !slices.Equal(srcs, []string{"a/*", "b/?"}) {
		t.Errorf("parsed %q, want a/* and b/?", srcs)
	}
}
