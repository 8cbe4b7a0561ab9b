package testrun_test

import (
	"regexp"
	"testing"
)

// randRule writes math.random(1000000) on every event.
var randRule = map[string]string{"r.lua": `local ss = require("ssrun")
ss.watch("go")
function on_event(ev) assert(ss.set("n", tostring(math.random(1000000)))) end`}

// written runs the case (seed line, possibly empty) and returns the
// number the rule wrote, read from the failure diff.
func written(t *testing.T, seed string) string {
	t.Helper()
	failed, out := run(t, randRule, `
cases:
  - name: r
`+seed+`
    steps:
      - set: {go: "1"}
        expect: {writes: [SET n x]}
`)
	m := regexp.MustCompile(`\+ SET n (\d+)\n`).FindStringSubmatch(out)
	if failed != 1 || m == nil {
		t.Fatalf("want a failure showing the write:\n%s", out)
	}
	return m[1]
}

// math.random is seeded per case: the same seed (or none, the default)
// gives the same numbers in every run, another seed other numbers.
func TestSeededRandom(t *testing.T) {
	a, b := written(t, "    seed: 7"), written(t, "    seed: 7")
	if a != b {
		t.Errorf("seed 7 wrote %s, then %s", a, b)
	}
	if c := written(t, "    seed: 8"); c == a {
		t.Errorf("seeds 7 and 8 both wrote %s", a)
	}
	d, e := written(t, ""), written(t, "")
	if d != e {
		t.Errorf("the default seed wrote %s, then %s", d, e)
	}
}
