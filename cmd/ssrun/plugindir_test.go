package main

import (
	"path/filepath"
	"regexp"
	"testing"
)

// pluginRules is a rules folder holding the batch-summary example plugin.
func pluginRules(t *testing.T) string {
	t.Helper()
	bin, err := builds.Exe("batch-summary", "../../examples/batch-summary")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	copyFile(t, bin, filepath.Join(dir, "batch-summary"), 0o755)
	return dir
}

// workDirs lists the plugin runtimes' working directories under dir.
func workDirs(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "ssrun-plugins-*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// --plugin-dir is where `ssrun dev` and `ssrun run` keep the copies of the
// plugin binaries they run (and the plugins' sockets): the one writable,
// exec-able directory a container with a read-only root file system needs.
// The plugin runs from there, and the directory is left empty on exit.
func TestPluginDirFlag(t *testing.T) {
	rules := pluginRules(t)
	work := filepath.Join(t.TempDir(), "plugins") // made if missing
	out, errw, stop := start(t, "dev", rules, "--listen", "127.0.0.1:0", "--plugin-dir", work)
	addr := waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	runCLI(t, "", "kv", "--broker", addr, "set", "sensor/1", "10")
	waitSummary(t, addr, errw.String)
	dirs := workDirs(t, work)
	if len(dirs) != 1 {
		t.Fatalf("working directories under --plugin-dir %s: %v, want one", work, dirs)
	}
	copies, _ := filepath.Glob(filepath.Join(dirs[0], "*", "batch-summary"))
	if len(copies) != 1 {
		t.Fatalf("no copy of the plugin in %s", dirs[0])
	}
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
	if dirs := workDirs(t, work); len(dirs) != 0 {
		t.Fatalf("working directories left after exit: %v", dirs)
	}
}

// Without --plugin-dir the working directory goes to the temporary
// directory, which TMPDIR names.
func TestPluginDirDefaultsToTMPDIR(t *testing.T) {
	rules := pluginRules(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	out, errw, stop := start(t, "dev", rules, "--listen", "127.0.0.1:0")
	waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))
	if dirs := workDirs(t, tmp); len(dirs) != 1 {
		t.Fatalf("working directories under TMPDIR %s: %v, want one; log:\n%s", tmp, dirs, errw.String())
	}
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
}
