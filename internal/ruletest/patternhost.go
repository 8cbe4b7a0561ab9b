package ruletest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/glob"
)

// PatternHost is an abitest.Host whose store holds a fixed list of keys,
// for the runtimes' tests of keys, watch_pattern and unwatch_pattern. The
// verbs are abitest.Host's, on the store engine (SCAN, the host's reserved
// prefix, max_watched_keys): a malformed glob is INVALID, a pattern under
// the reserved prefix DENIED, more matches than the limit LIMIT. (The
// host's own semantics, rescans and events, are the host's tests'.)
type PatternHost struct {
	*abitest.Host

	mu   sync.Mutex
	keys []string
}

// patternVerbs are the verbs of revision 3.
var patternVerbs = []string{abi.FnKeys, abi.FnWatchPattern, abi.FnUnwatchPattern}

// NewPatternHost returns a PatternHost over an abitest.New() whose store
// holds keys.
func NewPatternHost(keys ...string) *PatternHost {
	h := &PatternHost{Host: abitest.New()}
	h.SetKeys(keys...)
	return h
}

// Reset resets the abitest.Host (see its Reset: the patterns watched, the
// calls, the failures injected, MaxWatchedKeys) and puts the keys back.
func (h *PatternHost) Reset() {
	h.Host.Reset()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.putLocked()
}

// SetKeys makes keys the keys of h's store.
func (h *PatternHost) SetKeys(keys ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, k := range h.keys {
		_ = h.Store().Del(context.Background(), k, abi.DelOptions{})
	}
	h.keys = slices.Clone(keys)
	h.putLocked()
}

// putLocked puts h.keys in the store; h.mu is held.
func (h *PatternHost) putLocked() {
	for _, k := range h.keys {
		h.Put(k, []byte("v"))
	}
}

// Called returns how many calls of verb h was asked, and the last one.
func (h *PatternHost) Called(verb string) (int, abitest.Call) {
	c, _ := h.LastCall(verb)
	return h.Calls(verb), c
}

// PatternCase is a case of the revision 3 verbs: a command for a test rule
// (see Dispatch), the report it must give, and checks.
type PatternCase struct {
	Name  string
	Setup func(h *PatternHost)
	Cmd   []string
	Want  string
	Check func(t *testing.T, h *PatternHost)
}

// PatternKeys are the keys of the PatternHost of PatternCases.
var PatternKeys = []string{"thermostats/0001/setPoint", "thermostats/0002/setPoint", "thermostats/0002/mode",
	"thermostats/\x00\xff/setPoint", "hvac/1/target", "$ssrun/timers/x"}

// patternsWatched checks that h watches exactly want.
func patternsWatched(want map[string]abi.WatchOptions) func(t *testing.T, h *PatternHost) {
	return func(t *testing.T, h *PatternHost) {
		t.Helper()
		if got := h.Patterns(); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("patterns watched %v, want %v", got, want)
		}
	}
}

// PatternCases are the cases every runtime runs for keys, watch_pattern and
// unwatch_pattern over NewPatternHost(PatternKeys...): results, options,
// the host's refusals (INVALID, DENIED, LIMIT) and every status injected.
func PatternCases() []PatternCase {
	sp := `["thermostats/\x00\xff/setPoint" "thermostats/0001/setPoint" "thermostats/0002/setPoint"]` // bytewise
	cases := []PatternCase{
		{Name: "keys ok", Cmd: []string{"keys", "thermostats/*/setPoint", "0"},
			Want: `keys status=OK msg="" n=3 keys=` + sp,
			Check: func(t *testing.T, h *PatternHost) {
				if n, c := h.Called(abi.FnKeys); n != 1 || c.Key != "thermostats/*/setPoint" || c.Keys != (abi.KeysOptions{}) {
					t.Errorf("calls %+v, want one with the pattern and limit 0", c)
				}
			}},
		{Name: "keys none", Cmd: []string{"keys", "nothing/*", "5"}, Want: `keys status=OK msg="" n=0 keys=[]`},
		{Name: "keys limit passed", Cmd: []string{"keys", "thermostats/*", "7"}, Want: `keys status=OK msg="" n=4 keys=` +
			`["thermostats/\x00\xff/setPoint" "thermostats/0001/setPoint" "thermostats/0002/mode" "thermostats/0002/setPoint"]`,
			Check: func(t *testing.T, h *PatternHost) {
				if n, c := h.Called(abi.FnKeys); n != 1 || c.Keys.Limit != 7 {
					t.Errorf("calls %+v, want limit 7", c)
				}
			}},
		{Name: "keys LIMIT", Cmd: []string{"keys", "thermostats/*", "2"},
			Want: `keys status=LIMIT msg="keys \"thermostats/*\": more than 2 keys match" n=0 keys=[]`},
		{Name: "keys malformed pattern", Cmd: []string{"keys", "thermostats/[", "0"},
			Want: fmt.Sprintf("keys status=INVALID msg=%q n=0 keys=[]", `keys "thermostats/[": `+globError("thermostats/["))},
		{Name: "keys reserved", Cmd: []string{"keys", "$ssrun/*", "0"},
			Want: `keys status=DENIED msg="keys \"$ssrun/*\": keys under $ssrun/ are reserved for the host" n=0 keys=[]`},
		// The runtime refuses a limit out of range, before the Host.
		{Name: "keys negative limit", Cmd: []string{"keys", "p/*", "-1"}, Want: limitRefused("-1"), Check: keysNotAsked},
		{Name: "keys limit past the maximum", Cmd: []string{"keys", "p/*", "100001"}, Want: limitRefused("100001"), Check: keysNotAsked},
		{Name: "watch_pattern ok", Cmd: []string{"watch_pattern", "thermostats/*/setPoint", ""},
			Want: `watch_pattern status=OK msg=""`, Check: patternsWatched(map[string]abi.WatchOptions{"thermostats/*/setPoint": {}})},
		{Name: "watch_pattern self", Cmd: []string{"watch_pattern", "hvac/*", "self"},
			Want: `watch_pattern status=OK msg=""`, Check: patternsWatched(map[string]abi.WatchOptions{"hvac/*": {Self: true}})},
		{Name: "watch_pattern LIMIT", Setup: func(h *PatternHost) { h.MaxWatchedKeys = 1 }, Cmd: []string{"watch_pattern", "thermostats/*", ""},
			Want:  `watch_pattern status=LIMIT msg="watch_pattern \"thermostats/*\": more than max_watched_keys (1) keys match"`,
			Check: patternsWatched(map[string]abi.WatchOptions{})},
		{Name: "watch_pattern malformed", Cmd: []string{"watch_pattern", `a\`, ""},
			Want: fmt.Sprintf("watch_pattern status=INVALID msg=%q", `watch_pattern "a\\": `+globError(`a\`))},
		{Name: "unwatch_pattern ok", Setup: func(h *PatternHost) { _ = h.WatchPattern(context.Background(), "hvac/*", abi.WatchOptions{}) },
			Cmd: []string{"unwatch_pattern", "hvac/*"}, Want: `unwatch_pattern status=OK msg=""`,
			Check: patternsWatched(map[string]abi.WatchOptions{})},
		{Name: "unwatch_pattern not watched", Cmd: []string{"unwatch_pattern", "hvac/*"},
			Want: `unwatch_pattern status=NOT_FOUND msg="unwatch_pattern \"hvac/*\": not watched"`},
	}
	for _, verb := range patternVerbs {
		args, empty := []string{verb, "p/*", ""}, ""
		switch verb {
		case abi.FnKeys:
			args[2], empty = "0", " n=0 keys=[]"
		case abi.FnUnwatchPattern:
			args = args[:2]
		}
		for _, f := range abitest.Failures(verb) {
			cases = append(cases, PatternCase{
				Name:  verb + " " + f.Name,
				Setup: func(h *PatternHost) { h.Fail(verb, f.Err) },
				Cmd:   args,
				Want:  fmt.Sprintf("%s status=%s msg=%q%s", verb, f.Status, f.Err.Error(), empty),
			})
		}
	}
	return cases
}

// limitRefused is the report of keys "p/*" with limit refused by the
// runtime.
func limitRefused(limit string) string {
	return fmt.Sprintf("keys status=INVALID msg=%q n=0 keys=[]",
		`keys "p/*": limit `+limit+` out of range (0 for the default of 1000, at most 100000)`)
}

// keysNotAsked checks that keys did not reach the Host.
func keysNotAsked(t *testing.T, h *PatternHost) {
	t.Helper()
	if n, c := h.Called(abi.FnKeys); n != 0 {
		t.Errorf("the Host was asked: %+v", c)
	}
}

// globError is internal/glob's message for a malformed pattern.
func globError(pattern string) string {
	_, err := glob.Compile(pattern, nil)
	return err.Error()
}

// RunPatternCases runs each case as a subtest on the rule and PatternHost
// open returns for it, then checks that together the cases saw each verb
// succeed and return every status but OK and BUFFER_TOO_SMALL.
func RunPatternCases(t *testing.T, cases []PatternCase, open func(t *testing.T) (abi.Script, *PatternHost)) {
	seen := map[string]map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.Name, func(t *testing.T) {
			s, h := open(t)
			if tc.Setup != nil {
				tc.Setup(h)
			}
			got := Run(t, s, h.Host, Command(tc.Cmd[0], tc.Cmd[1:]...))
			if got != tc.Want {
				t.Errorf("report\n got %s\nwant %s", got, tc.Want)
			}
			if tc.Check != nil {
				tc.Check(t, h)
			}
			verb, rest, _ := strings.Cut(got, " status=")
			st, _, _ := strings.Cut(rest, " ")
			if seen[verb] == nil {
				seen[verb] = map[string]bool{}
			}
			seen[verb][st] = true
		})
	}
	if t.Failed() {
		return
	}
	for _, verb := range patternVerbs {
		for _, st := range abi.Statuses() {
			if st != abi.StatusBufferTooSmall && !seen[verb][st.String()] {
				t.Errorf("verb %s: status %s not covered", verb, st)
			}
		}
	}
}
