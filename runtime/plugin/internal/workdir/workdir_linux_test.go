package workdir

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestRemoveStale: only directories named like working directories, with
// an owner lock that nobody holds, are removed; a live owner's (here: held
// by this process through another open file) and anything not provably a
// working directory stay.
func TestRemoveStale(t *testing.T) {
	base := t.TempDir()
	live, err := Create(base)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	dead, err := Create(base)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dead.Path, "copy"), []byte("binary"), 0o700); err != nil {
		t.Fatal(err)
	}
	_ = dead.lock.Close() // as the kernel does when the owner dies

	keep := []string{live.Path}
	for _, name := range []string{Prefix + "nolock", "other"} {
		p := filepath.Join(base, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		keep = append(keep, p)
	}
	file := filepath.Join(base, Prefix+"file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(base, Prefix+"link") // to a stale directory: not followed
	target := filepath.Join(t.TempDir(), Prefix+"target")
	if err := os.Mkdir(target, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(target, lockName), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, file, link, target)

	removed, err := RemoveStale(base)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{dead.Path}) {
		t.Errorf("removed %v, want only %s", removed, dead.Path)
	}
	if _, err := os.Stat(dead.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale %s still there: %v", dead.Path, err)
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}

	if err := live.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Remove left %s: %v", live.Path, err)
	}
}

// TestCreateHoldsLock: a new working directory holds nothing but its owner
// lock, taken: it is not found stale.
func TestCreateHoldsLock(t *testing.T) {
	d, err := Create(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Remove()
	entries, err := os.ReadDir(d.Path)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != lockName {
		t.Errorf("new working directory holds %v, want only %s", entries, lockName)
	}
	if ok, err := RemoveIfStale(d.Path); ok || err != nil {
		t.Errorf("RemoveIfStale of a live directory: %t, %v", ok, err)
	}
}
