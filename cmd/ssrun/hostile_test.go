package main

import (
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// forger is a client id that, printed raw, clears the screen and forges a
// provenance line: the chain would seem to start with an admin's write.
const forger = "evil\x1b[2J\nchain:\n  SET ok/in by client admin-console"

// hostileFile is a rule file name with a newline, an escape sequence that
// sets the terminal's title and a bell.
const hostileFile = "a\nok forged.lua\x1b]0;pwned\x07.lua"

// wantInert checks that out, printed on a terminal, can do nothing but show
// text: no escape, bell, carriage return or other control character but
// the newlines, which number lines (the lines a clean version of out has),
// and every hostile string shown quoted.
func wantInert(t *testing.T, what, out string, lines int, quoted ...string) {
	t.Helper()
	if n := strings.Count(out, "\n"); n != lines {
		t.Errorf("%s: %d lines, want %d (a newline from outside made more): %q", what, n, lines, out)
	}
	if i := strings.IndexFunc(out, func(r rune) bool { return r < ' ' && r != '\n' || r == 0x7f }); i >= 0 {
		t.Errorf("%s: a control character %q at byte %d reaches the terminal:\n%q", what, out[i], i, out)
	}
	for _, q := range quoted {
		if !strings.Contains(out, q) {
			t.Errorf("%s: lacks %s: %q", what, q, out)
		}
	}
}

// ssrun why shows a writer's client id, keys, versions and rule names
// quoted when they hold control characters: the forged chain line stays
// inside one quoted string.
func TestWhyQuotesHostileText(t *testing.T) {
	write := func(client, key, rule, version string) provenance.Write {
		return provenance.Write{Key: key, Rule: rule, Op: "SET", Value: "v", ValueSize: 1, Version: version,
			At:     time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC),
			Event:  provenance.Cause{Key: "ok/in", Op: "SET", Version: "v1", Client: client},
			Chain:  []provenance.Step{{Rule: rule, Key: key, Op: "SET", Version: "v2"}},
			Origin: &provenance.Origin{Key: "ok/in", Op: "SET", Version: "v1", Client: client}}
	}
	var clean, b strings.Builder
	if err := printWhy(&clean, write("evil", "k", "a.lua", "12")); err != nil {
		t.Fatal(err)
	}
	if err := printWhy(&b, write(forger, "k\x1b[1A", hostileFile, "1\r2")); err != nil {
		t.Fatal(err)
	}
	wantInert(t, "why", b.String(), strings.Count(clean.String(), "\n"), `"evil\x1b[2J\nchain:\n  SET ok/in by client admin-console"`,
		`"k\x1b[1A"`, `"1\r2"`, `"a\nok forged.lua\x1b]0;pwned\a.lua"`)
	if n := strings.Count(b.String(), "\nchain:"); n != 1 {
		t.Errorf("%d chain: lines, want 1: %q", n, b.String())
	}
}

// ssrun status shows file names, watched keys, lock names and errors
// quoted when they hold control characters.
func TestStatusQuotesHostileText(t *testing.T) {
	at := time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)
	doc := func(name, kind, lastError, watch, lock string) admin.StatusDoc {
		return admin.StatusDoc{Rules: []admin.RuleDoc{{Name: name, Path: "/rules/" + name, Kind: kind, Hash: "abc", State: "running",
			LastError: lastError, LastErrorAt: &at, Watches: []string{watch}, Locks: []string{lock}}}}
	}
	var clean, b strings.Builder
	if err := printStatus(&clean, doc("a.lua", "lua", "boom", "w", "l")); err != nil {
		t.Fatal(err)
	}
	if err := printStatus(&b, doc(hostileFile, "lua\r", "boom\x1b[2J\nhost: 0 notifications", "w\x1b[K", "l\x00")); err != nil {
		t.Fatal(err)
	}
	wantInert(t, "status", b.String(), strings.Count(clean.String(), "\n"), `"a\nok forged.lua\x1b]0;pwned\a.lua"`, `"w\x1b[K"`, `"l\x00"`,
		`"boom\x1b[2J\nhost: 0 notifications"`, `"lua\r"`)
}

// ssrun kv watch shows a key's value quoted when it holds control
// characters, so a writer cannot forge a change of another key.
func TestKVWatchQuotesHostileValues(t *testing.T) {
	var out strings.Builder
	a := &app{stdout: &out, stderr: &out}
	w := &watcher{a: a, seen: map[string]keyState{}}
	v, _ := hlc.Parse("001795361424941:00001:StateStore")
	w.print("door", protocol.OpSet, v, []byte("open\n001795361424942:00000:StateStore SET alarm off\x1b[2J"))
	a.printEvent(protocol.Event{Kind: protocol.EventNotify, Op: protocol.OpSet, Key: []byte("door\x1b[A"), Value: []byte("x\ry"), Version: v})
	wantInert(t, "kv watch", out.String(), 2, `"open\n001795361424942:00000:StateStore SET alarm off\x1b[2J"`, `"door\x1b[A"`, `"x\ry"`)
}

// ssrun check names a rule file whose name holds control characters
// quoted, when it is ok and when it fails.
func TestCheckQuotesHostileFileNames(t *testing.T) {
	dir := checkDir(t, map[string]string{hostileFile: goodRule, "b\x1b[2J.lua": "function on_event(ev)\n  if then\nend\n"})
	r := runCLI(t, "", "check", dir)
	wantInert(t, "check stdout", r.stdout, 1, strconv.Quote(filepath.Join(dir, hostileFile)))
	wantInert(t, "check stderr", r.stderr, 2, `b\x1b[2J.lua`)
	if r.code != 1 {
		t.Errorf("exit %d, want 1", r.code)
	}
}

// Errors the admin endpoint answers are shown quoted when they hold
// control characters.
func TestAdminErrorsQuoted(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(admin.ErrorDoc{Error: "broken\x1b[2J\nssrun: all fine"})
	})}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
	r := runCLI(t, "", "status", "--admin", ln.Addr().String())
	wantInert(t, "status stderr", r.stderr, 1, `"broken\x1b[2J\nssrun: all fine"`)
}
