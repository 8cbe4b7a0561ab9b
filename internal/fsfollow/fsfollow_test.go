package fsfollow_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/fsfollow"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// follower runs Follow on dir until the test ends and records each report.
type follower struct {
	w       *fsfollow.Watcher
	mu      sync.Mutex
	reports [][]string
}

func follow(t *testing.T, dir string, o fsfollow.Options) *follower {
	t.Helper()
	w, err := fsfollow.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	f := &follower{w: w}
	o.OnChange = func(paths []string) {
		slices.Sort(paths)
		f.mu.Lock()
		f.reports = append(f.reports, paths)
		f.mu.Unlock()
	}
	o.OnError = func(err error) { t.Error(err) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); fsfollow.Follow(ctx, w, o) }()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	return f
}

// times returns how many reports named p.
func (f *follower) times(p string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, r := range f.reports {
		if slices.Contains(r, p) {
			n++
		}
	}
	return n
}

// waitReported waits until p was reported.
func (f *follower) waitReported(t *testing.T, p string) {
	t.Helper()
	testutil.WaitFor(t, filepath.Base(p)+" reported", func() bool { return f.times(p) > 0 })
}

// create creates p and writes parts to it, one write each, leaving it
// open (it is closed when the test ends, if not before).
func create(t *testing.T, p string, parts ...string) *os.File {
	t.Helper()
	fd, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = fd.Close() })
	for _, s := range parts {
		if _, err := fd.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

func needEndOfWrite(t *testing.T, w *fsfollow.Watcher) {
	if !w.EndOfWrite() {
		t.Skip("this platform does not report the end of a write")
	}
}

// A file written through a descriptor still open is not reported, however
// long the writer waits, until it is closed; then it is reported once.
func TestFollowWaitsForTheClose(t *testing.T) {
	dir := t.TempDir()
	f := follow(t, dir, fsfollow.Options{OpenQuiet: time.Hour})
	needEndOfWrite(t, f.w)
	half := filepath.Join(dir, "half")
	fd := create(t, half, "part one;")
	// Events come in order: once a file written after it is reported, the
	// open file's events were seen.
	other := filepath.Join(dir, "other")
	if err := os.WriteFile(other, []byte("whole"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, other)
	if n := f.times(half); n != 0 {
		t.Fatalf("a file still open for writing was reported %d times", n)
	}
	if _, err := fd.WriteString("part two"); err != nil {
		t.Fatal(err)
	}
	if err := fd.Close(); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, half)
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, marker)
	if n := f.times(half); n != 1 {
		t.Fatalf("the file was reported %d times, want once", n)
	}
}

// Many writes through one descriptor are one change; a write through a
// temporary file renamed into place reports the final name.
func TestFollowCoalescesWritesAndRename(t *testing.T) {
	dir := t.TempDir()
	f := follow(t, dir, fsfollow.Options{OpenQuiet: time.Hour})
	needEndOfWrite(t, f.w)
	many := filepath.Join(dir, "many")
	if err := create(t, many, slices.Repeat([]string{"line\n"}, 100)...).Close(); err != nil {
		t.Fatal(err)
	}
	final := filepath.Join(dir, "final")
	tmp := filepath.Join(dir, ".final.tmp")
	if err := os.WriteFile(tmp, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, final); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, final)
	f.waitReported(t, many)
	if n := f.times(many); n != 1 {
		t.Fatalf("100 writes and a close reported %d times, want once", n)
	}
}

// Where the end of a write is not known (or a writer keeps its file open
// past OpenQuiet), the quiet period stands in for the close.
func TestFollowFallsBackToQuiet(t *testing.T) {
	dir := t.TempDir()
	f := follow(t, dir, fsfollow.Options{OpenQuiet: time.Millisecond})
	p := filepath.Join(dir, "open")
	create(t, p, "kept open")
	f.waitReported(t, p)
}

// Follow returns when the watcher is closed.
func TestFollowEndsWithTheWatcher(t *testing.T) {
	w, err := fsfollow.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		fsfollow.Follow(context.Background(), w, fsfollow.Options{OnChange: func([]string) {}, OnError: func(error) {}})
	}()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
	case <-time.After(testutil.WaitBound):
		t.Fatal("Follow still running after the watcher closed")
	}
	if err := w.Add(t.TempDir()); err == nil {
		t.Fatal("Add on a closed watcher did not fail")
	}
}

// A file renamed away and written anew under its name (vim's save: the old
// file becomes the backup) is one change of the file, not a removal and a
// new file: a path gone waits up to Quiet for its return.
func TestFollowWaitsForARemovedFileToReturn(t *testing.T) {
	dir := t.TempDir()
	f := follow(t, dir, fsfollow.Options{Quiet: time.Hour, OpenQuiet: time.Hour})
	needEndOfWrite(t, f.w)
	p := filepath.Join(dir, "rule")
	if err := os.WriteFile(p, []byte("v1"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, p)
	if err := os.Rename(p, p+"~"); err != nil {
		t.Fatal(err)
	}
	// However long the editor takes to write the new file: once a file
	// written after the rename is reported, the rename was seen.
	marker := filepath.Join(dir, "marker")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, marker)
	if n := f.times(p); n != 1 {
		t.Fatalf("the file renamed away was reported before it came back (%d reports)", n)
	}
	if err := os.WriteFile(p, []byte("v2"), 0o644); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the new file reported", func() bool { return f.times(p) == 2 })
}

// A removed file is reported once Quiet has passed without its return.
func TestFollowReportsARemoval(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "gone")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	f := follow(t, dir, fsfollow.Options{Quiet: time.Millisecond})
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	f.waitReported(t, p)
}
