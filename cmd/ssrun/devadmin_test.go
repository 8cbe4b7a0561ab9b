package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// A fix by revert is seen, and `ssrun status` works out of the box against
// `ssrun dev`: dev serves its admin endpoint on a free loopback port by
// default and says so; status, given no --admin, finds it. A broken save
// shows as "reload failed"; saving the running version back logs that the
// file matches it again, and status shows it running.
func TestDevRevertIsLoggedAndStatusFindsDev(t *testing.T) {
	runDir := t.TempDir()
	env := []string{"XDG_RUNTIME_DIR=" + runDir} // this dev's published address, and no other's
	dir := t.TempDir()
	rule := filepath.Join(dir, "copy.lua")
	good := []byte("local ss = require(\"ssrun\")\nss.watch(\"in\")\nfunction on_event(ev) ss.set(\"out\", ev.value) end\n")
	if err := os.WriteFile(rule, good, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(ssrunBinary(t), "dev", dir, "--listen", "127.0.0.1:0")
	cmd.Env = append(os.Environ(), env...)
	p := startCmd(t, cmd)
	waitOutput(t, p.stdout, regexp.MustCompile(`admin endpoint on http://127\.0\.0\.1:\d+ .*\n.*ssrun status`))
	waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv`))
	status := func() string {
		t.Helper()
		r := runBin(t, env, "status")
		if r.code != 0 {
			t.Fatalf("ssrun status without --admin: %+v", r)
		}
		return r.stdout
	}
	if s := status(); !strings.Contains(s, "copy.lua") || !strings.Contains(s, "running") {
		t.Fatalf("status:\n%s", s)
	}

	if err := os.WriteFile(rule, []byte("function on_event(ev\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p.stderr, regexp.MustCompile(`reload failed; the previous version keeps running.*copy\.lua`))
	testutil.WaitFor(t, "status: reload failed", func() bool { return strings.Contains(status(), "reload failed: previous version runs") })

	if err := os.WriteFile(rule, good, 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p.stderr, regexp.MustCompile(`the file matches the running version again.*rule=copy\.lua`))
	if s := status(); strings.Contains(s, "reload failed") || !strings.Contains(s, "running") {
		t.Fatalf("status after the revert:\n%s", s)
	}
	p.signal(os.Interrupt)
	if code := p.wait("dev"); code != 0 {
		t.Fatalf("dev exit %d:\n%s", code, p.stderr.String())
	}
	// The published address goes with dev.
	if _, err := os.Stat(filepath.Join(runDir, "ssrun", "dev-admin")); !os.IsNotExist(err) {
		t.Fatalf("the published address outlived dev: %v", err)
	}
}
