package host

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// watchDir runs WatchDir on e's folder until the test ends, with extra
// files named as in ssrun.yaml.
func (e *env) watchDir(extra ...string) {
	e.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- e.host.WatchDir(ctx, e.dir, ready, extra...) }()
	e.t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ready:
	case err := <-done:
		e.t.Fatalf("WatchDir: %v", err)
	}
}

// registerOut registers the Go rules "w1" and "w2": each watches k and
// writes its name to out.
func (e *env) registerOut(names ...string) {
	for _, name := range names {
		e.rt.register(name, goRule{init: watchInit("k"), handle: func(ctx context.Context, h abi.Host, _ abi.Event) error {
			_, err := h.Set(ctx, "out", []byte(name), abi.SetOptions{})
			return err
		}})
	}
}

// waitOut waits until the rule answering on k writes want to out.
func (e *env) waitOut(want string) {
	e.t.Helper()
	waitFor(e.t, "out = "+want, func() bool {
		e.set("k", strconv.FormatInt(time.Now().UnixNano(), 10))
		v, _ := e.get("out")
		return v == want
	})
}

// replace writes data to p through a temporary file and a rename, as
// editors and kubelet do.
func replace(t *testing.T, p, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(p), ".tmp-"+filepath.Base(p))
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
}

// An extensionless file without the execute bit is not run, and the log
// says which file and how to make it a plugin.
func TestWatchDirWarnsAboutNonExecutablePlugin(t *testing.T) {
	e := newEnv(t)
	early := filepath.Join(e.dir, "early-plugin")
	e.write(early, "#!/bin/sh\n")
	e.watchDir()
	if len(e.logLines("early-plugin", "chmod +x "+early)) == 0 {
		t.Fatalf("no warning for %s:\n%s", early, e.logs.String())
	}
	late := filepath.Join(e.dir, "late-plugin")
	e.write(late, "#!/bin/sh\n")
	waitFor(t, "warning for a file added later", func() bool { return len(e.logLines("late-plugin", "chmod +x "+late)) > 0 })
	if n := len(e.host.Status()); n != 0 {
		t.Fatalf("%d rules loaded from non-executable files", n)
	}
}

// A rule file that is a symlink is reloaded when its target changes,
// whether the target is rewritten in place or replaced by a rename.
func TestWatchDirReloadsSymlinkTarget(t *testing.T) {
	e := newEnv(t)
	e.registerOut("w1", "w2", "w3")
	elsewhere := t.TempDir()
	target := filepath.Join(elsewhere, "rule.gorule")
	e.write(target, "w1")
	if err := os.Symlink(target, filepath.Join(e.dir, "w.gorule")); err != nil {
		t.Fatal(err)
	}
	e.watchDir()
	e.waitOut("w1")
	replace(t, target, "w2")
	e.waitOut("w2")
	e.write(target, "w3")
	e.waitOut("w3")
	if n := len(e.host.Status()); n != 1 {
		t.Fatalf("%d rules loaded, want 1", n)
	}
}

// A Kubernetes ConfigMap volume: every file is a symlink through "..data",
// itself a symlink to a timestamped folder; an update writes a new folder
// and swaps "..data" atomically. The rules follow the swap: a changed rule
// reloads, a new one loads, a dropped one stops.
func TestWatchDirFollowsConfigMapSwap(t *testing.T) {
	e := newEnv(t)
	e.registerOut("w1", "w2")
	e.rt.register("extra", goRule{init: watchInit("extra")})
	e.rt.register("gone", goRule{init: watchInit("gone")})
	version := func(name string, files map[string]string) {
		t.Helper()
		dir := filepath.Join(e.dir, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f, data := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		tmp := filepath.Join(e.dir, "..data_tmp")
		if err := os.Symlink(name, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(e.dir, "..data")); err != nil {
			t.Fatal(err)
		}
		for f := range files {
			link := filepath.Join(e.dir, f)
			if _, err := os.Lstat(link); err == nil {
				continue
			}
			if err := os.Symlink(filepath.Join("..data", f), link); err != nil {
				t.Fatal(err)
			}
		}
	}
	version("..2026_01_01_00_00_00.1", map[string]string{"w.gorule": "w1", "gone.gorule": "gone"})
	e.watchDir()
	e.waitOut("w1")
	if n := len(e.host.Status()); n != 2 {
		t.Fatalf("%d rules loaded, want 2", n)
	}
	// kubelet: new folder, swap ..data, add the new file's link, remove
	// dropped links and the old folder.
	version("..2026_01_01_00_01_00.2", map[string]string{"w.gorule": "w2", "extra.gorule": "extra"})
	if err := os.Remove(filepath.Join(e.dir, "gone.gorule")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(e.dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	e.waitOut("w2")
	waitFor(t, "extra loaded and gone stopped", func() bool {
		names := map[string]bool{}
		for _, s := range e.host.Status() {
			names[filepath.Base(s.Path)] = true
		}
		return len(names) == 2 && names["w.gorule"] && names["extra.gorule"]
	})
}

// The ..data swap alone, with the links untouched, reloads the rules: it is
// the only event a kubelet update of an existing file produces.
func TestWatchDirReloadsOnDataSwapAlone(t *testing.T) {
	e := newEnv(t)
	e.registerOut("w1", "w2")
	for i, v := range []string{"w1", "w2"} {
		dir := filepath.Join(e.dir, "..v"+strconv.Itoa(i))
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "w.gorule"), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("..v0", filepath.Join(e.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..data/w.gorule", filepath.Join(e.dir, "w.gorule")); err != nil {
		t.Fatal(err)
	}
	e.watchDir()
	e.waitOut("w1")
	tmp := filepath.Join(e.dir, "..data_tmp")
	if err := os.Symlink("..v1", tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(e.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	e.waitOut("w2")
}
