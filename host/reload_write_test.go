package host

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// loads counts the log lines of loads and failed loads of the rule file
// name.
func (e *env) loads(name string) (ok, failed int) {
	return len(e.logLines("rule loaded", "rule="+name)) + len(e.logLines("rule reloaded", "rule="+name)),
		len(e.logLines("rule not loaded", name)) + len(e.logLines("reload failed", name))
}

// A rule file still open for writing is not loaded, however long its
// writer pauses, until it is closed: then it loads once, whole.
func TestWatchDirLoadsAFileOnlyOnceClosed(t *testing.T) {
	reloadFollow.OpenQuiet = time.Hour // a writer that pauses for as long as the machine stalls
	t.Cleanup(func() { reloadFollow.OpenQuiet = 0 })
	e := newEnv(t)
	e.registerOut("w1", "w2")
	e.watchDir()
	p := filepath.Join(e.dir, "half.gorule")
	fd, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	if _, err := fd.WriteString("w"); err != nil { // "w2", half of it
		t.Fatal(err)
	}
	// Events come in order: once a rule written after it runs, the open
	// file's events were seen.
	if err := os.WriteFile(filepath.Join(e.dir, "other.gorule"), []byte("w1"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.waitOut("w1")
	if ok, failed := e.loads("half.gorule"); ok+failed != 0 {
		t.Fatalf("a file still open for writing was loaded (%d) or refused (%d):\n%s", ok, failed, e.logs.String())
	}
	if _, err := fd.WriteString("2"); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "half.gorule loaded once closed", func() bool { ok, _ := e.loads("half.gorule"); return ok > 0 })
	if ok, failed := e.loads("half.gorule"); ok != 1 || failed != 0 {
		t.Fatalf("loaded %d times, refused %d times; want once, whole:\n%s", ok, failed, e.logs.String())
	}
}

// A burst (a file written in pieces through one descriptor, an editor's
// save through a temporary file and a rename, several files copied at
// once) loads each rule once, with its final content.
func TestWatchDirLoadsABurstOnce(t *testing.T) {
	reloadFollow.OpenQuiet = time.Hour
	t.Cleanup(func() { reloadFollow.OpenQuiet = 0 })
	e := newEnv(t)
	e.registerOut("w1", "w2")
	e.watchDir()
	fd, err := os.Create(filepath.Join(e.dir, "pieces.gorule"))
	if err != nil {
		t.Fatal(err)
	}
	for _, piece := range []string{"w", "2", "\n"} {
		if _, err := fd.WriteString(piece); err != nil {
			t.Fatal(err)
		}
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	// The editor's temporary file is no rule file, as with most editors
	// (a rule-named one may load for a moment if the rename comes late).
	tmp := filepath.Join(e.dir, "saved.gorule.tmp")
	e.write(tmp, "w1")
	if err := os.Rename(tmp, filepath.Join(e.dir, "saved.gorule")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"c1.gorule", "c2.gorule", "c3.gorule"} {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte("w1"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names := []string{"pieces.gorule", "saved.gorule", "c1.gorule", "c2.gorule", "c3.gorule"}
	waitFor(t, "the five rules loaded", func() bool { return len(e.host.Status()) == len(names) })
	for _, name := range names {
		if ok, failed := e.loads(name); ok != 1 || failed != 0 {
			t.Errorf("%s: loaded %d times, refused %d times; want once, whole", name, ok, failed)
		}
	}
}

// vim's save renames the old file to a backup and writes the new one: the
// rule is reloaded, not stopped and started again, however long the editor
// takes between the two.
func TestWatchDirReloadsThroughRenameAway(t *testing.T) {
	reloadFollow.Quiet = time.Hour
	t.Cleanup(func() { reloadFollow.Quiet = 0 })
	e := newEnv(t)
	e.registerOut("w1", "w2")
	e.watchDir()
	p := filepath.Join(e.dir, "w.gorule")
	e.write(p, "w1")
	e.waitOut("w1")
	if err := os.Rename(p, p+"~"); err != nil {
		t.Fatal(err)
	}
	// Events come in order: once a rule written after the rename runs, the
	// rename was seen.
	if err := os.WriteFile(filepath.Join(e.dir, "marker.gorule"), []byte("w2"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "marker.gorule loaded", func() bool { ok, _ := e.loads("marker.gorule"); return ok > 0 })
	e.write(p, "w2")
	waitFor(t, "the new w.gorule loaded", func() bool { ok, _ := e.loads("w.gorule"); return ok == 2 })
	if stops := e.logLines("rule stopped", "rule=w.gorule"); len(stops) != 0 {
		t.Fatalf("the rule was stopped while its file was being saved:\n%s", stops)
	}
}
