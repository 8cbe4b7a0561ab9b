package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// configMapDir is a rules folder shaped as kubelet makes a ConfigMap volume:
// the files of each version in a timestamped folder, "..data" a symlink to
// the current one, and each file a symlink through "..data". update writes
// a new version the way kubelet does: a new timestamped folder, a new
// symlink "..data_tmp" renamed over "..data" (one atomic step), links for
// files new in this version, and the old folder removed.
type configMapDir struct {
	t       *testing.T
	dir     string
	current string
	n       int
}

func newConfigMapDir(t *testing.T, files map[string]string) *configMapDir {
	c := &configMapDir{t: t, dir: t.TempDir()}
	c.update(files)
	return c
}

func (c *configMapDir) update(files map[string]string) {
	t := c.t
	t.Helper()
	c.n++
	ts := fmt.Sprintf("..2026_11_23_14_00_%02d.%09d", c.n, c.n)
	if err := os.Mkdir(filepath.Join(c.dir, ts), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(c.dir, ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tmp := filepath.Join(c.dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.dir, "..data")); err != nil {
		t.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(c.dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			t.Fatal(err)
		}
	}
	if c.current != "" {
		if err := os.RemoveAll(filepath.Join(c.dir, c.current)); err != nil {
			t.Fatal(err)
		}
	}
	c.current = ts
}

// scaleRule is a Lua rule that writes in*factor to out.
func scaleRule(factor int) string {
	return fmt.Sprintf(`local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  if ev.op == "SET" then ss.set("out", tostring(tonumber(ev.value) * %d)) end
end
`, factor)
}

// The rules of `ssrun dev`, run as a process, follow a Kubernetes ConfigMap
// update: the atomic "..data" swap (the rule's own link never changes)
// replaces the running rule with the new version, and a file new in the
// update is loaded. This is how deploy/kubernetes mounts the rules.
func TestDevFollowsConfigMapSwap(t *testing.T) {
	cm := newConfigMapDir(t, map[string]string{"scale.lua": scaleRule(2)})
	p, addr := startDev(t, cm.dir)
	if r := runCLI(t, "", "kv", "--broker", addr, "set", "in", "21"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	waitKV(t, addr, "out", "42")

	cm.update(map[string]string{
		"scale.lua": scaleRule(3),
		"copy.lua": `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) if ev.op == "SET" then ss.set("copy", ev.value) end end
`,
	})
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; ; i++ {
		runCLI(t, "", "kv", "--broker", addr, "set", "in", fmt.Sprint(i))
		out := runCLI(t, "", "kv", "--broker", addr, "get", "out").stdout
		cp := runCLI(t, "", "kv", "--broker", addr, "get", "copy").stdout
		if out == fmt.Sprint(3*i)+"\n" && cp == fmt.Sprint(i)+"\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the ..data swap: out=%q copy=%q for in=%d; stderr:\n%s", out, cp, i, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
