package main

import (
	"strings"
	"testing"
	"time"
)

// A rule's canary: settings decode to host.Canary; a rule without them
// reloads at once.
func TestCanaryConfigDecodes(t *testing.T) {
	c, err := loadConfig(writeFile(t, "ssrun.yaml", `
rules:
  thermostat.lua:
    canary: {events: 20, duration: 30s, tolerance: 0.5, ignore: ["stats/*"]}
  other.lua:
    timeout: 1s
`))
	if err != nil {
		t.Fatal(err)
	}
	rules := c.hostRules()
	k := rules["thermostat.lua"].Canary
	if k.Events != 20 || k.Duration != 30*time.Second || k.Tolerance != 0.5 || len(k.Ignore) != 1 || k.Ignore[0] != "stats/*" {
		t.Fatalf("canary: %+v", k)
	}
	if o := rules["other.lua"].Canary; o.Events != 0 || o.Duration != 0 {
		t.Fatalf("a rule without canary: got %+v", o)
	}
}

// Wrong canary settings are refused with the file, the YAML names and the
// rule.
func TestCanaryConfigErrors(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown", "rules:\n  a.lua:\n    canary: {evnts: 3}\n", `line 3: unknown setting "evnts" under canary: (want one of events, duration, tolerance, ignore)`},
		{"bad duration", "rules:\n  a.lua:\n    canary: {duration: soon}\n", `line 3: bad duration "soon"`},
		{"negative", "rules:\n  a.lua:\n    canary: {events: -1}\n", "rules: a.lua: canary: events, duration and tolerance must not be negative"},
		{"no window", "rules:\n  a.lua:\n    canary: {tolerance: 1}\n", "rules: a.lua: canary: set events or duration"},
		{"bad ignore", "defaults:\n  canary: {events: 1, ignore: [\"a/[\"]}\n", `defaults: canary: ignore: bad key pattern "a/["`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "ssrun.yaml", tc.yaml)
			_, err := loadConfig(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want it to name %s and contain %q", err, p, tc.want)
			}
		})
	}
}
