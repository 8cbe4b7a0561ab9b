package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ConfigMapDir is a folder laid out as kubelet lays out a ConfigMap volume:
// the files of each version in a hidden timestamped folder, "..data" a
// symlink to the current one, and each file a symlink through "..data".
// Make it with NewConfigMapDir; Update writes a new version.
type ConfigMapDir struct {
	Dir string // the mount: what a program is given

	tb      testing.TB
	current string            // the timestamped folder ..data points to
	files   map[string]string // its files
	n       int
}

// NewConfigMapDir makes a ConfigMap volume holding files (name -> content)
// in a temporary directory of tb.
func NewConfigMapDir(tb testing.TB, files map[string]string) *ConfigMapDir {
	tb.Helper()
	c := &ConfigMapDir{Dir: tb.TempDir(), tb: tb}
	c.Update(files)
	return c
}

// Update replaces the volume's content with files the way kubelet does:
// a new timestamped folder, a symlink "..data_tmp" renamed over "..data"
// (the one atomic step), links for the files new in this version, the
// previous folder removed, and the links of files no longer present.
func (c *ConfigMapDir) Update(files map[string]string) {
	tb := c.tb
	tb.Helper()
	c.n++
	ts := fmt.Sprintf("..2026_11_23_14_00_%02d.%09d", c.n%60, c.n)
	if err := os.Mkdir(filepath.Join(c.Dir, ts), 0o755); err != nil {
		tb.Fatal(err)
	}
	WriteFiles(tb, filepath.Join(c.Dir, ts), files)
	tmp := filepath.Join(c.Dir, "..data_tmp")
	if err := os.Symlink(ts, tmp); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(c.Dir, "..data")); err != nil {
		tb.Fatal(err)
	}
	for name := range files {
		link := filepath.Join(c.Dir, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			tb.Fatal(err)
		}
	}
	if c.current != "" {
		if err := os.RemoveAll(filepath.Join(c.Dir, c.current)); err != nil {
			tb.Fatal(err)
		}
	}
	c.current = ts
	for name := range c.files {
		if _, ok := files[name]; !ok {
			if err := os.Remove(filepath.Join(c.Dir, name)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	c.files = files
}
