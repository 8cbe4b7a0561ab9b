package fsfollow

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
)

func writeFile(t testing.TB, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// described renders events as "name:op", sorted.
func described(evs []event) []string {
	ops := map[op]string{opWritten: "written", opWhole: "whole", opGone: "gone", opAttr: "attr"}
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, filepath.Base(ev.path)+":"+ops[ev.op])
	}
	slices.Sort(out)
	return out
}

// waitClockPast waits until a file written now gets a modification time
// after every one recorded in dir's snapshot: a change made from then on
// gets other times than the recorded ones.
func waitClockPast(t *testing.T, s *snapshot, dir string) {
	t.Helper()
	var last int64
	s.mu.Lock()
	for _, e := range s.dirs[dir] {
		last = max(last, e.mtime, e.ctime)
	}
	s.mu.Unlock()
	probe := filepath.Join(t.TempDir(), "probe")
	testutil.WaitFor(t, "the file system's clock to pass the recorded times", func() bool {
		writeFile(t, probe, "x")
		info, err := os.Stat(probe)
		if err != nil {
			t.Fatal(err)
		}
		return info.ModTime().UnixNano() > last
	})
}

// TestRescanNamesWhatChanged records a folder, changes it in every way a
// rescan must see (content, a same-size rewrite with its modification
// time set back, permissions, a link's target, new and removed entries),
// and checks that the rescan names exactly those, then nothing once
// recorded again; a folder gone has its entries removed.
func TestRescanNamesWhatChanged(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"changed", "rewritten", "removed", "chmod", "kept"} {
		writeFile(t, filepath.Join(dir, n), n)
	}
	if err := os.Symlink("changed", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	s := newSnapshot()
	s.racy = 0 // the test waits for the clock instead
	s.add(dir)
	waitClockPast(t, s, dir)

	writeFile(t, filepath.Join(dir, "changed"), "changed, longer")
	rw := filepath.Join(dir, "rewritten")
	before, err := os.Stat(rw)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, rw, "REWRITTEN") // same size
	if err := os.Chtimes(rw, before.ModTime(), before.ModTime()); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "removed")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, "chmod"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "new"), "new")
	if err := os.Remove(filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("kept", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	want := []string{"changed:written", "chmod:written", "link:whole", "new:written", "removed:gone", "rewritten:written"}
	if runtime.GOOS != "linux" { // the known limit: no change time compared
		want = slices.DeleteFunc(want, func(s string) bool { return s == "rewritten:written" })
	}
	if got := described(s.rescan()); !slices.Equal(got, want) {
		t.Fatalf("rescan = %q, want %q", got, want)
	}
	if got := s.rescan(); len(got) != 0 {
		t.Fatalf("second rescan = %q, want nothing", described(got))
	}

	// A change Follow reported is recorded: not named again.
	waitClockPast(t, s, dir)
	writeFile(t, filepath.Join(dir, "changed"), "changed again")
	s.note([]string{filepath.Join(dir, "changed")})
	if got := s.rescan(); len(got) != 0 {
		t.Fatalf("rescan after note = %q, want nothing", described(got))
	}

	// A folder that is gone: its entries are removed, and it is dropped.
	sub := filepath.Join(dir, "sub")
	writeFile(t, filepath.Join(sub, "x"), "x")
	s.add(sub)
	if err := os.RemoveAll(sub); err != nil {
		t.Fatal(err)
	}
	if got, want := described(s.rescan()), []string{"sub:gone", "x:gone"}; !slices.Equal(got, want) {
		t.Fatalf("rescan after removing sub = %q, want %q", got, want)
	}
	s.mu.Lock()
	_, kept := s.dirs[sub]
	s.mu.Unlock()
	if kept {
		t.Fatal("a folder gone is still recorded")
	}
}

// TestRescanNamesRacyEntries checks that an entry recorded within the racy
// window of its last change is named by the next rescan though nothing
// differs (a rewrite in the same clock tick would look the same), and
// that one changed long before is not.
func TestRescanNamesRacyEntries(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "fresh"), "x")
	s := newSnapshot()
	s.add(dir)
	if got, want := described(s.rescan()), []string{"fresh:written"}; !slices.Equal(got, want) {
		t.Fatalf("rescan = %q, want %q", got, want)
	}
	old := entry{mode: 0o644, size: 1, mtime: 1, ctime: 1}
	if !old.same(old) {
		t.Fatal("an entry changed long before is not the same as itself")
	}
	racy := old
	racy.racy = true
	if racy.same(old) {
		t.Fatal("a racy entry counts as the same")
	}
}

// rescanEntries is how many files the folder of the rescan benchmarks holds.
const rescanEntries = 1000

// unchangedFolder is the rescan benchmarks' fixture: a folder of
// rescanEntries files and a snapshot of it with the racy window off (the
// files were just written), so that a rescan finds no change.
func unchangedFolder(b *testing.B) (string, *snapshot) {
	b.Helper()
	dir := b.TempDir()
	for i := range rescanEntries {
		writeFile(b, filepath.Join(dir, fmt.Sprintf("rule-%04d.lua", i)), "return {}")
	}
	s := newSnapshot()
	s.racy = 0
	s.add(dir)
	return dir, s
}

// BenchmarkRescan rescans a folder of 1,000 files none of which changed
// (the racy window off: the files were just written), alternating each
// rescan with the floor of any rescan: listing the folder and Lstat-ing
// each entry. It reports both per entry and their ratio (x-floor); ns/op
// and B/op cover the two.
func BenchmarkRescan(b *testing.B) {
	dir, s := unchangedFolder(b)
	var rescan, floor time.Duration
	b.ReportAllocs()
	for b.Loop() {
		t0 := time.Now()
		if evs := s.rescan(); len(evs) != 0 {
			b.Fatalf("%d changes in an unchanged folder", len(evs))
		}
		t1 := time.Now()
		names, err := readNames(dir)
		if err != nil {
			b.Fatal(err)
		}
		for _, name := range names {
			if _, err := os.Lstat(filepath.Join(dir, name)); err != nil {
				b.Fatal(err)
			}
		}
		rescan, floor = rescan+t1.Sub(t0), floor+time.Since(t1)
	}
	b.ReportMetric(float64(rescan.Nanoseconds())/float64(b.N)/rescanEntries, "rescan-ns/entry")
	b.ReportMetric(float64(floor.Nanoseconds())/float64(b.N)/rescanEntries, "floor-ns/entry")
	b.ReportMetric(float64(rescan)/float64(floor), "x-floor")
}

// BenchmarkRescanAlloc is BenchmarkRescan's rescan alone, for its
// allocations.
func BenchmarkRescanAlloc(b *testing.B) {
	_, s := unchangedFolder(b)
	b.ReportAllocs()
	for b.Loop() {
		s.rescan()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/rescanEntries, "ns/entry")
}

func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}
