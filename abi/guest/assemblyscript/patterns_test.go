package assemblyscript

import (
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// sharedPatternCases runs the shared cases of keys, watch_pattern and
// unwatch_pattern (ruletest.PatternCases) and those of this SDK, and
// checks they saw every verb succeed and return every status
// (RunPatternCases). It returns the verbs run. The cases whose keys are
// not UTF-8 are skipped: keys are strings in this SDK, decoded as UTF-8
// ("keys utf-8" lists keys of several scripts).
func sharedPatternCases(t *testing.T) map[string]bool {
	var cases []ruletest.PatternCase
	for _, tc := range ruletest.PatternCases() {
		if strings.Contains(tc.Want, `\x`) {
			t.Logf("skipped %q: keys are strings in this SDK", tc.Name)
			continue
		}
		cases = append(cases, tc)
	}
	utf8Keys := []string{"fleet/é/1", "fleet/日本/2", "fleet/a\x00b/3", "other"}
	cases = append(cases,
		ruletest.PatternCase{Name: "keys utf-8", Setup: func(h *ruletest.PatternHost) { h.SetKeys(utf8Keys...) },
			Cmd: []string{"keys", "fleet/*", "3"}, Want: `keys status=OK msg="" n=3 keys=["fleet/a\x00b/3" "fleet/é/1" "fleet/日本/2"]`},
		ruletest.PatternCase{Name: "keys LIMIT empty list", Setup: func(h *ruletest.PatternHost) { h.SetKeys(utf8Keys...) },
			Cmd: []string{"keys", "fleet/*", "2"}, Want: `keys status=LIMIT msg="keys \"fleet/*\": more than 2 keys match" n=0 keys=[]`},
	)
	seen := map[string]bool{}
	ruletest.RunPatternCases(t, cases, func(t *testing.T) (abi.Script, *ruletest.PatternHost) {
		h := ruletest.NewPatternHost(ruletest.PatternKeys...)
		return start(t, h, abi.Limits{}), h
	})
	for _, tc := range cases {
		seen[tc.Cmd[0]] = true
	}
	return seen
}
