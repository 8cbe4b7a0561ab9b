package group

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/host/internal/membership"
)

// A rule whose content differs between members is reported once, with the
// members of each version, however many steps see it.
func TestGroupWarnsOnceOfDifferingRule(t *testing.T) {
	var buf bytes.Buffer
	g := &Group{Ownership: &Ownership{name: "g"}, log: slog.New(slog.NewTextHandler(&buf, nil)), warned: map[string]bool{}}
	sets := map[string]membership.RuleSet{"a": {"r.lua": "1111", "s.lua": "5"}, "b": {"r.lua": "2222", "s.lua": "5"}, "c": {"r.lua": "1111"}}
	live := []membership.RosterEntry{{ID: "a", Digest: "d1"}, {ID: "b", Digest: "d2"}, {ID: "c", Digest: "d3"}}
	for range 3 {
		g.warnDiffering(live, sets)
	}
	out := buf.String()
	if n := strings.Count(out, "different versions"); n != 1 {
		t.Fatalf("%d warnings, want 1:\n%s", n, out)
	}
	if !strings.Contains(out, "rule=r.lua") || !strings.Contains(out, `"1111: a,c; 2222: b"`) {
		t.Fatalf("warning does not name the rule and its versions: %s", out)
	}
	sets["b"]["r.lua"] = "3333" // a new version: reported again
	live[1].Digest = "d4"
	g.warnDiffering(live, sets)
	if n := strings.Count(buf.String(), "different versions"); n != 2 {
		t.Fatalf("%d warnings after a new version, want 2", n)
	}
}
