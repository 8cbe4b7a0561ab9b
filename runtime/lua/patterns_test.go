package lua

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// A watch_pattern the host refuses as INVALID or DENIED while the rule
// loads fails the load, naming the file and the line; LIMIT (the store's
// content) does not, nor a refusal in a handler, which the rule gets as
// nil, message, code.
func TestWatchPatternRefusedAtLoad(t *testing.T) {
	for _, tc := range []struct {
		name, src, want string
		setup           func(h *abitest.Host)
	}{
		{"malformed", "local ss = require('ssrun')\n\nss.watch_pattern('[')\nfunction on_event(ev) end", `rule.lua:3: load: watch_pattern "[": unterminated [ in pattern`, nil},
		{"denied", "local ss = require('ssrun')\nlocal ok, msg, code = ss.watch_pattern('t/*')\nfunction on_event(ev) end", `rule.lua:2: load: watch_pattern "t/*": not permitted`,
			func(h *abitest.Host) { h.Deny = deny("t/*") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			if tc.setup != nil {
				tc.setup(h)
			}
			_, err := compileRule(t, New(Config{}), "rule.lua", tc.src).Start(context.Background(), h, abi.Limits{})
			var le *Error
			if !errors.As(err, &le) || err.Error() != tc.want || !errors.Is(err, abi.ErrRaised) {
				t.Fatalf("Start = %v, want %q", err, tc.want)
			}
		})
	}

	h := abitest.New()
	h.MaxWatchedKeys = 1
	puts("t/1", "t/2")(h)
	s := startRule(t, `local ss = require('ssrun')
local ok, msg, code = ss.watch_pattern('t/*')
assert(ok == nil and code == "LIMIT", msg)
function on_event(ev)
  local ok, msg, code = ss.watch_pattern('[')
  assert(ok == nil and code == "INVALID" and msg:find("unterminated", 1, true), msg)
end`, h, abi.Limits{})
	if err := s.Handle(context.Background(), setEvent("k", "v")); err != nil {
		t.Fatalf("a refusal in a handler: %v", err)
	}
}

// keys builds a table of exactly the keys, memory accounted.
func TestKeysTable(t *testing.T) {
	h := abitest.New()
	for _, k := range []string{"a/1", "a/2", "a/3", "b"} {
		h.Put(k, nil)
	}
	got := evalRule(t, h, `#ss.keys("a/*"), ss.keys("a/*")[3], ss.keys("a/*")[4]`)
	if want := "number:3 | string:a/3 | nil:nil"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if !strings.Contains(evalRule(t, h, `ss.keys("*", 2)`), "LIMIT") {
		t.Error("keys past its limit did not fail with LIMIT")
	}
}
