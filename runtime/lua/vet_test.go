package lua

import (
	"context"
	"errors"
	"slices"
	"sort"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// TestCompileRefusesUnknownModuleNames: a call of ss.<name> the ssrun
// module does not have fails Compile with the file and the call's line,
// wherever it is (top level, on_event, a nested function), under any
// local name for the module; no line would run it before an event.
func TestCompileRefusesUnknownModuleNames(t *testing.T) {
	rt := New(Config{})
	for _, tc := range []struct {
		name, src string
		line      int
		call      string
	}{
		{"in on_event", "local ss = require('ssrun')\nfunction on_event(ev)\n  ss.sett(ev.key, 'x')\nend", 3, "ss.sett"},
		{"at top level", "local ss = require(\"ssrun\")\nss.wach('a')\nfunction on_event() end", 2, "ss.wach"},
		{"other alias", "local S = require 'ssrun'\nfunction on_event(ev)\n\n  return S.gett(ev.key)\nend", 4, "S.gett"},
		{"nested function", "local ss = require('ssrun')\nlocal function f()\n  return function() ss.lok('l', 1) end\nend\nfunction on_event() f() end", 3, "ss.lok"},
		{"method call", "local ss = require('ssrun')\nfunction on_event() ss:nope() end", 2, "ss:nope"},
		{"direct require", "function on_event()\n  require('ssrun').bad()\nend", 2, "require(\"ssrun\").bad"},
		{"global alias", "ss = require('ssrun')\nfunction on_event() ss.sset('a', 'b') end", 2, "ss.sset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := rt.Compile(context.Background(), "rules/x.lua", []byte(tc.src))
			var ce *abi.CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want *abi.CompileError", err, err)
			}
			if ce.File != "rules/x.lua" || ce.Line != tc.line || !strings.Contains(ce.Msg, tc.call) || !strings.Contains(ce.Msg, "set") {
				t.Errorf("error %+v, want rules/x.lua line %d naming %s and the module's functions", ce, tc.line, tc.call)
			}
		})
	}
}

// TestCompileAcceptsModuleUses: what the check must not refuse: every
// function the module has, names the rule adds to the module itself, a
// name it tests for before calling (feature detection), and locals that
// shadow the module's name.
func TestCompileAcceptsModuleUses(t *testing.T) {
	rt := New(Config{})
	for _, tc := range []struct{ name, src string }{
		{"every function", "local ss = require('ssrun')\nfunction on_event()\n" + everyCall() + "end"},
		{"added by the rule", "local ss = require('ssrun')\nfunction ss.helper() end\nss.other = function() end\nfunction ss:m() end\nfunction on_event() ss.helper() ss.other() ss:m() end"},
		{"feature test", "local ss = require('ssrun')\nfunction on_event() if ss.future then ss.future() end end"},
		{"shadowed by a parameter", "local ss = require('ssrun')\nlocal function f(ss) return ss.anything() end\nfunction on_event() end"},
		{"shadowed by a local", "local ss = require('ssrun')\nfunction on_event()\n  local ss = {x = function() end}\n  ss.x()\nend"},
		{"shadowed by a loop", "local ss = require('ssrun')\nfunction on_event()\n  for _, ss in ipairs({}) do ss.y() end\nend"},
		{"other module", "local t = require('ssrun').json\nfunction on_event() t.encode({}) end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := rt.Compile(context.Background(), "rules/x.lua", []byte(tc.src)); err != nil {
				t.Fatalf("compile: %v", err)
			}
		})
	}
}

// everyCall calls every name the vet knows, one per line.
func everyCall() string {
	var b strings.Builder
	for _, n := range moduleNames() {
		b.WriteString("  ss." + n + "()\n")
	}
	return b.String()
}

// TestModuleNamesMatchTheModule: the names the vet knows are exactly the
// fields of the module a rule gets.
func TestModuleNamesMatchTheModule(t *testing.T) {
	h := abitest.New()
	s := startRule(t, "ss = require('ssrun')\nfunction on_event() end", h, abi.Limits{})
	var got []string
	s.(*script).st.L.G.Global.RawGetString("ss").(*glua.LTable).ForEach(func(k, _ glua.LValue) {
		got = append(got, k.String())
	})
	sort.Strings(got)
	if want := moduleNames(); !slices.Equal(got, want) {
		t.Errorf("module fields %v, vet knows %v", got, want)
	}
}
