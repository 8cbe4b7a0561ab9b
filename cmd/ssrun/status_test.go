package main

import (
	"strings"
	"testing"

	"github.com/ssrun/ssrun/admin"
)

// printStatus ends with the group's counts for a host in a group, with a
// line for withdrawn rules when there are any, and with none for a host in
// no group.
func TestPrintStatusGroupLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		host admin.HostDoc
		want []string // lines that must be there
		not  []string // and must not
	}{
		{"no group", admin.HostDoc{}, nil, []string{"group:"}},
		{"group", admin.HostDoc{Owned: 2, Standby: 3}, []string{"group: 2 rule(s) owned here, 3 on standby"}, []string{"withdrawn"}},
		{"withdrawn", admin.HostDoc{Owned: 1, Withdrawn: 1},
			[]string{"group: 1 rule(s) owned here, 0 on standby", "group: 1 rule(s) withdrawn: their version here fails to load"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b strings.Builder
			if err := printStatus(&b, admin.StatusDoc{Host: tc.host}); err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("output lacks %q:\n%s", w, b.String())
				}
			}
			for _, n := range tc.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("output has %q:\n%s", n, b.String())
				}
			}
		})
	}
}

// printStatus shows a rule's patterns with the keys they cover, and the
// host's pattern counters only when a rule used patterns.
func TestPrintStatusPatterns(t *testing.T) {
	var b strings.Builder
	doc := admin.StatusDoc{Rules: []admin.RuleDoc{{Name: "fleet.lua", Path: "r/fleet.lua", Patterns: []string{"t/*/sp", "u/*"}, PatternKeys: 1200}},
		Host: admin.HostDoc{Patterns: &admin.PatternsDoc{Watched: 2, Scans: 9, Pages: 14, FoundLate: 3, OverLimit: 1}}}
	if err := printStatus(&b, doc); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"patterns: t/*/sp, u/* (1200 keys)", "patterns: 2 watched, 9 scans (14 pages), 3 keys found late, 1 over max_watched_keys, 0 scan errors"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("output lacks %q:\n%s", w, b.String())
		}
	}
	b.Reset()
	if err := printStatus(&b, admin.StatusDoc{}); err != nil || strings.Contains(b.String(), "patterns") {
		t.Errorf("a host without patterns: %v\n%s", err, b.String())
	}
}
