package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// recorder is a Lua rule that copies "in" to "hvac/out" and records the
// status of that write in "result".
const recorder = `local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  local ok, msg, code = ss.set("hvac/out", ev.value)
  ss.set("result", ev.value .. " " .. (code or "OK"))
end
`

// ssrun.yaml edited while `ssrun dev` runs: narrowed permissions apply to
// the running rule (its next write is DENIED), a broken edit is refused
// with file and line and the previous settings stay, a rule entry naming
// no file is a warning, at start and on reload.
func TestDevReloadsConfig(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"rec.lua": recorder})
	cfg := filepath.Join(dir, "ssrun.yaml")
	writeCfg := func(s string) {
		t.Helper()
		tmp := filepath.Join(dir, ".ssrun.yaml.tmp")
		if err := os.WriteFile(tmp, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, cfg); err != nil {
			t.Fatal(err)
		}
	}
	writeCfg("rules:\n  rec.lua:\n    write: [\"hvac/**\", result]\n  recc.lua:\n    read: []\n")
	out, errw, stop := start(t, "dev", dir, "--listen", "127.0.0.1:0")
	addr := waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	waitOutput(t, errw, regexp.MustCompile(`rule entry matches no file.*rule=recc\.lua`))
	expect := writeStatus(t, addr, errw)
	expect("OK")
	writeCfg("rules:\n  rec.lua:\n    write: [result]\n  other*.lua: {}\n")
	waitOutput(t, errw, regexp.MustCompile(`ssrun.yaml applied`))
	waitOutput(t, errw, regexp.MustCompile(`rule entry matches no file.*rule=other\*\.lua`))
	expect("DENIED")
	writeCfg("rules:\n  rec.lua:\n    write: [\"hvac/**\", result]\n    timeout: soon\n")
	waitOutput(t, errw, regexp.MustCompile(`ssrun.yaml not applied; the previous settings stay.*ssrun\.yaml.*line 4`))
	expect("DENIED")
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
}

// writeStatus returns a function that sets "in" to a fresh value until the
// recorder rule reports the status want for its write (or fails the test).
func writeStatus(t *testing.T, addr string, errw *testutil.Buffer) func(want string) {
	n := 0
	return func(want string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			n++
			v := strings.Repeat("v", n)
			runCLI(t, "", "kv", "--broker", addr, "set", "in", v)
			got := ""
			for range 50 {
				if r := runCLI(t, "", "kv", "--broker", addr, "get", "result"); strings.HasPrefix(r.stdout, v+" ") {
					got = strings.TrimSpace(strings.TrimPrefix(r.stdout, v+" "))
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("write status %q, want %q; log:\n%s", got, want, errw.String())
			}
		}
	}
}

// An ssrun.yaml mounted from a Kubernetes ConfigMap is a link through
// "..data"; the kubelet updates it by swapping that link. `ssrun run`
// applies the new settings.
func TestRunFollowsConfigMapSwapOfConfig(t *testing.T) {
	b := brokertest.Start(t)
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"rec.lua": recorder})
	version := 0
	swap := func(yaml string) {
		t.Helper()
		version++
		ts := filepath.Join(dir, fmt.Sprintf("..2026_11_23_%d", version))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		testutil.WriteFiles(t, ts, map[string]string{"ssrun.yaml": yaml})
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	swap("rules:\n  rec.lua:\n    write: [\"hvac/**\", result]\n")
	if err := os.Symlink(filepath.Join("..data", "ssrun.yaml"), filepath.Join(dir, "ssrun.yaml")); err != nil {
		t.Fatal(err)
	}
	out, errw, stop := start(t, "run", dir, "--broker", b.Addr())
	waitOutput(t, out, regexp.MustCompile(`1 rule\(s\) from`))
	expect := writeStatus(t, b.Addr(), errw)
	expect("OK")
	swap("rules:\n  rec.lua:\n    write: [result]\n")
	expect("DENIED")
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errw.String())
	}
}
