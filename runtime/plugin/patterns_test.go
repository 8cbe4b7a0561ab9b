package plugin

import (
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// allVerbs is abi.Verbs() with the verbs of revision 3, which the runtimes
// of this branch serve (once abi.Verbs() lists them, it is abi.Verbs()).
func allVerbs() []string {
	verbs := abi.Verbs()
	for _, v := range []string{abi.FnKeys, abi.FnWatchPattern, abi.FnUnwatchPattern} {
		if !slices.Contains(verbs, v) {
			verbs = append(verbs, v)
		}
	}
	return verbs
}

// patternCases are the shared cases and the one particular to plugins: a
// pattern of 1 MiB crosses whole.
func patternCases() []ruletest.PatternCase {
	big := strings.Repeat("*?", 512<<10)
	return append(ruletest.PatternCases(), ruletest.PatternCase{
		Name: "keys 1 MiB pattern", Cmd: []string{"keys", big, "0"}, Want: `keys status=OK msg="" n=0 keys=[]`,
		Check: func(t *testing.T, h *ruletest.PatternHost) {
			if n, c := h.Called(abi.FnKeys); n != 1 || c.Key != big {
				t.Errorf("the Host did not get the whole pattern")
			}
		}})
}

// TestPatternVerbs proves keys, watch_pattern and unwatch_pattern are wired
// from the Go SDK through gRPC to abi.Host, results (binary keys), options
// and every status with its message, both ways a plugin may call: on its
// session while an event runs, and with the Host service.
func TestPatternVerbs(t *testing.T) {
	for _, unary := range []bool{false, true} {
		t.Run(map[bool]string{false: "session", true: "unary"}[unary], func(t *testing.T) {
			h := ruletest.NewPatternHost(ruletest.PatternKeys...)
			s := inProcessScriptWith(t, h, unary)
			ruletest.RunPatternCases(t, patternCases(), func(*testing.T) (abi.Script, *ruletest.PatternHost) {
				h.Reset()
				return s, h
			})
		})
	}
}

// camelToSnake turns a Host method's name into its verb: VDel is vdel,
// WatchPattern watch_pattern.
func camelToSnake(name string) string {
	if name == "VDel" {
		return abi.FnVDel
	}
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('_')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}
