package host

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// A Lua print loop is held to the rule's log budget: per one-second window
// at most the budget, plus one summary line of what was suppressed; every
// line is either logged or counted as suppressed.
func TestE2ELogBudgetPrintLoop(t *testing.T) {
	const total = 20000
	for _, tc := range []struct {
		name         string
		lines, bytes int
	}{
		{"lines", 25, 1 << 20},
		{"bytes", 1 << 20, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newE2E(t, sandbox{kind: "lua"}, func(o *Config) {
				o.Rules = map[string]RuleConfig{"loud.lua": {Timeout: time.Minute, LogLines: tc.lines, LogBytes: tc.bytes}}
			})
			e.loadRule("loud.lua", []byte(`local ss = require("ssrun")
ss.watch("loud/go")
function on_event(ev)
  for i = 1, `+strconv.Itoa(total)+` do print("line " .. i) end
end
`))
			start := time.Now()
			e.set("loud/go", "1")
			waitFor(t, "print loop handled", func() bool { return e.ruleStatus("loud.lua").Handled == 1 })
			// The summary of the last window is written when it ends.
			waitFor(t, "every line logged or counted", func() bool {
				return len(e.printed())+suppressed(t, e.logLines("loud.lua", "suppressed")) == total
			})
			elapsed := time.Since(start)
			windows := int(elapsed/time.Second) + 2 // windows the loop and the wait can span
			printed := e.printed()
			summaries := e.logLines("loud.lua", "suppressed")
			var bytes int
			for _, l := range printed {
				bytes += len(l)
			}
			if len(printed) > tc.lines*windows {
				t.Errorf("%d lines logged in %v, budget %d lines per second", len(printed), elapsed, tc.lines)
			}
			if bytes > tc.bytes*windows {
				t.Errorf("%d bytes logged in %v, budget %d bytes per second", bytes, elapsed, tc.bytes)
			}
			if len(summaries) == 0 || len(summaries) > windows {
				t.Errorf("%d summary lines for %d windows:\n%s", len(summaries), windows, strings.Join(summaries, "\n"))
			}
			s := e.ruleStatus("loud.lua")
			if int(s.LogLinesSuppressed) != total-len(printed) || s.LogBytesSuppressed == 0 {
				t.Errorf("status counts %d lines, %d bytes suppressed; %d of %d lines were logged", s.LogLinesSuppressed, s.LogBytesSuppressed, len(printed), total)
			}
		})
	}
}

var printedRE = regexp.MustCompile(`msg="(line \d+)"`)

// printed returns the messages loud.lua's print loop got into the log.
func (e *env) printed() []string {
	var out []string
	for _, l := range e.logLines("rule=loud.lua") {
		if m := printedRE.FindStringSubmatch(l); m != nil {
			out = append(out, m[1])
		}
	}
	return out
}

var suppressedRE = regexp.MustCompile(`rule loud\.lua: (\d+) lines / (\d+) bytes suppressed`)

// suppressed sums the lines counted by summary lines.
func suppressed(t *testing.T, lines []string) int {
	t.Helper()
	n := 0
	for _, l := range lines {
		m := suppressedRE.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("summary line %q does not say how much was suppressed", l)
		}
		k, _ := strconv.Atoi(m[1])
		n += k
	}
	return n
}
