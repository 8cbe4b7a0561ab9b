package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/admin"
)

// `ssrun why KEY --rule NAME` says why a rule did not react to the key's
// last change, for people and as JSON: on the chain, alarm.lua does not
// watch the door, and it did react to the alarm state door.lua wrote.
func TestWhyNotCLI(t *testing.T) {
	addr, _ := chainAdmin(t)
	r := runCLI(t, "", "why", "door/front", "--rule", "alarm.lua", "--admin", addr)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "why alarm.lua did not react to door/front:\n  not_watched: it does not watch the key: its watches are \"alarm/state\"\n") {
		t.Errorf("not watched: %+v", r)
	}
	r = runCLI(t, "", "why", "alarm/state", "--rule", "alarm.lua", "-o", "json", "--admin", addr)
	var d admin.WhyNotDoc
	if err := json.Unmarshal([]byte(r.stdout), &d); r.code != 0 || err != nil {
		t.Fatalf("-o json: %v %+v", err, r)
	}
	if len(d.Reasons) == 0 || d.Reasons[0].Code != admin.WhyNotReacted || d.Reasons[0].Entry == nil || d.Reasons[0].Entry.ByRule != "door.lua" {
		t.Errorf("alarm.lua on alarm/state: %+v, want reacted, to door.lua's write", d)
	}
	r = runCLI(t, "", "why", "k", "--rule", "nope.lua", "--admin", addr)
	if r.code != 0 || !strings.Contains(r.stdout, "loading: no rule \"nope.lua\" is loaded") {
		t.Errorf("an unknown rule: %+v", r)
	}
}
