package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// Errors name the user's line: the Lua scaffold's check() helper blames
// the line that called it, not its own.
func TestLuaScaffoldCheckNamesTheCallersLine(t *testing.T) {
	dir := t.TempDir()
	if r := runBin(t, nil, "new", "lua", "copier", "--dir", dir); r.code != 0 {
		t.Fatalf("new: %+v", r)
	}
	src, err := os.ReadFile(filepath.Join(dir, "copier.lua"))
	if err != nil {
		t.Fatal(err)
	}
	caller, helper := 0, 0
	for i, l := range strings.Split(string(src), "\n") {
		switch {
		case strings.Contains(l, "check(ss.set(OUTPUT"):
			caller = i + 1
		case strings.Contains(l, "error(code"):
			helper = i + 1
		}
	}
	if caller == 0 || helper == 0 {
		t.Fatalf("the scaffold has no check() helper and call:\n%s", src)
	}
	// The rule may write nothing: its set fails, DENIED.
	testutil.WriteFiles(t, dir, map[string]string{"ssrun.yaml": "rules:\n  copier.lua:\n    write: []\n"})
	r := runBin(t, nil, "test", dir)
	if want := fmt.Sprintf(`copier.lua:%d: on_event: DENIED: set "copier/output": not permitted`, caller); r.code != 1 || !strings.Contains(r.stdout, want) {
		t.Fatalf("want %q (the caller's line, not the helper's %d):\n%+v", want, helper, r)
	}
}

// A Go panic's stack trace is printed as lines, not as one line full of
// \n\t; a Lua runtime error is kind=error, not kind=crash (a crash is the
// sandbox's).
func TestDevLogsPanicAsLinesAndLuaErrorAsError(t *testing.T) {
	dir := t.TempDir()
	p, err := builds.WASM("panicker.wasm", "./testdata/panicker")
	if err != nil {
		t.Fatal(err)
	}
	copyFile(t, p, filepath.Join(dir, "panicker.wasm"), 0o644)
	testutil.WriteFiles(t, dir, map[string]string{"raiser.lua": "local ss = require(\"ssrun\")\nss.watch(\"raise/in\")\nfunction on_event(ev)\n  error(\"no good: \" .. ev.value)\nend\n"})
	d, addr := startDev(t, dir)
	for _, kv := range [][]string{{"panic/in", "x"}, {"raise/in", "y"}} {
		if r := runBin(t, nil, "kv", "--broker", addr, "set", kv[0], kv[1]); r.code != 0 {
			t.Fatalf("kv set: %+v", r)
		}
	}
	waitOutput(t, d.stderr, regexp.MustCompile(`msg="rule failed" rule=raiser\.lua .*kind=error err="\S*raiser\.lua:4: on_event: no good: y"`))
	logs := waitOutput(t, d.stderr, regexp.MustCompile(`(?m)^time=\S+ level=ERROR msg="handler panic: boom: x" rule=panicker\.wasm.*\n((?:\t.*\n)+)`))
	if !strings.Contains(logs[1], "\tgoroutine ") || !strings.Contains(logs[1], "testdata/panicker/main.go:") {
		t.Errorf("the stack trace lines:\n%s", logs[1])
	}
	for _, l := range strings.Split(d.stderr.String(), "\n") {
		if strings.Contains(l, `\n\t`) {
			t.Errorf("a line with \\n\\t in it: %s", l)
		}
	}
	if strings.Contains(d.stderr.String(), "rule=raiser.lua key=raise/in op=SET kind=crash") {
		t.Errorf("a Lua error reported as a crash:\n%s", d.stderr.String())
	}
}

// `ssrun check` says its store is empty when a rule's top-level code read a
// key it needs.
func TestCheckSaysItsStoreIsEmpty(t *testing.T) {
	dir := t.TempDir()
	rule := "local ss = require(\"ssrun\")\nlocal limit = tonumber(ss.get(\"config/limit\"))\nif not limit then error(\"config/limit is not a number\") end\nfunction on_event(ev) end\n"
	testutil.WriteFiles(t, dir, map[string]string{"needs.lua": rule})
	r := runBin(t, nil, "check", dir)
	if r.code != 1 || !strings.Contains(r.stderr, "needs.lua:3: load: config/limit is not a number") ||
		!strings.Contains(r.stderr, `ssrun check starts a rule against an empty store: its top-level code read "config/limit", absent here`) {
		t.Fatalf("%+v", r)
	}
}
