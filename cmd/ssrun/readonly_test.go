package main

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// What a read-only root file system needs (deploy/Dockerfile,
// deploy/kubernetes): `ssrun dev` running a Lua, a WebAssembly and a plugin
// rule writes only under --plugin-dir and $XDG_CACHE_HOME (the WebAssembly
// compilation cache); its working directory, $HOME and $TMPDIR stay empty,
// while it runs and after.
func TestWritesOnlyPluginDirAndCache(t *testing.T) {
	rules := pluginRules(t)
	for src, dst := range map[string]string{
		"../../examples/thermostat/thermostat.lua":           "thermostat.lua",
		"../../examples/thermostat-as/rules/thermostat.wasm": "thermostat.wasm",
	} {
		copyFile(t, src, filepath.Join(rules, dst), 0o644)
	}
	// The read-only rest, and the writable volume: short, as --plugin-dir
	// must be for the plugins' sockets to go there (a longer one sends
	// them to $TMPDIR, with a warning).
	root := t.TempDir()
	work, err := os.MkdirTemp("", "ssw-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	plugins := filepath.Join(work, "plugins")
	if len(plugins) > 44 {
		t.Skipf("the temporary directory's path is too long for a --plugin-dir that holds sockets: %s", plugins)
	}
	cmd := exec.Command(ssrunBinary(t), "dev", rules, "--listen", "127.0.0.1:0", "--plugin-dir", plugins)
	cmd.Dir = root
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); name != "HOME" && name != "TMPDIR" && name != "XDG_CACHE_HOME" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "HOME="+root, "TMPDIR="+root, "XDG_CACHE_HOME="+filepath.Join(work, "cache"))
	p := startCmd(t, cmd)
	addr := waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]

	runCLI(t, "", "kv", "--broker", addr, "set", "sensor/1", "10")
	runCLI(t, "", "kv", "--broker", addr, "set", "thermostat1/setPoint", "40")
	waitSummary(t, addr, p.stderr.String)
	waitKV(t, addr, "hvac1/target", "28")
	if n := strings.Count(p.stderr.String(), "rule loaded"); n != 3 {
		t.Fatalf("%d rule(s) loaded, want 3; stderr:\n%s", n, p.stderr.String())
	}
	if !hasFiles(t, filepath.Join(work, "cache")) {
		t.Errorf("no WebAssembly compilation cache under XDG_CACHE_HOME")
	}
	if w := entries(root); len(w) != 0 {
		t.Errorf("while running, written outside --plugin-dir and XDG_CACHE_HOME: %v", w)
	}
	p.signal(syscall.SIGTERM)
	if code := p.wait("SIGTERM"); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr.String())
	}
	if w := entries(root); len(w) != 0 {
		t.Errorf("after exit, written outside --plugin-dir and XDG_CACHE_HOME: %v", w)
	}
}

// entries lists what dir holds, at any depth.
func entries(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if path != dir {
			out = append(out, path)
		}
		return err
	})
	return out
}

// hasFiles reports whether dir holds a regular file, at any depth.
func hasFiles(t *testing.T, dir string) bool {
	t.Helper()
	found := false
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			found = true
		}
		return nil
	})
	return found
}
