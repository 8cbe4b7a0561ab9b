package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// t0 is the fake wall clock's start in these tests.
var t0 = time.UnixMilli(1_700_000_000_000)

// dstore is a store on a data directory with a fake clock.
type dstore struct {
	*Store
	t   *testing.T
	clk *clockT
	o   *recorder
	rec Recovery
	log *testutil.Buffer
}

// openDir opens a store on dir at the clock's time. It fails the test on
// error; see tryOpenDir.
func openDir(t *testing.T, dir string, clk *clockT, mods ...func(*PersistConfig)) *dstore {
	t.Helper()
	d, err := tryOpenDir(t, dir, clk, mods...)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	return d
}

func tryOpenDir(t *testing.T, dir string, clk *clockT, mods ...func(*PersistConfig)) (*dstore, error) {
	t.Helper()
	lb := &testutil.Buffer{}
	pc := PersistConfig{Dir: dir, Policy: FsyncAlways, Interval: time.Second, Log: slog.New(slog.NewTextHandler(lb, nil))}
	for _, m := range mods {
		m(&pc)
	}
	s := New(clk.now, Quota{Keys: -1, Bytes: -1})
	rec, err := s.OpenData(pc)
	if err != nil {
		return nil, err
	}
	d := &dstore{Store: s, t: t, clk: clk, o: &recorder{id: "o"}, rec: rec, log: lb}
	t.Cleanup(func() { _ = s.Close() })
	return d, nil
}

func (d *dstore) close() {
	d.t.Helper()
	if err := d.Close(); err != nil {
		d.t.Fatalf("close: %v", err)
	}
}

// do runs a command stamped with the fake clock, with __ft when ft != "".
func (d *dstore) do(ft string, args ...string) Reply {
	ts := hlc.HLC{Wall: d.clk.now().UnixMilli(), Node: "client"}.String()
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	req := Request{Payload: resp.EncodeRequest(b...), TS: &ts, ClientID: d.o.id, Observer: func() Observer { return d.o }}
	if ft != "" {
		req.FT = &ft
	}
	return d.Execute(req)
}

// set runs SET and returns its version, failing unless applied.
func (d *dstore) set(args ...string) hlc.HLC {
	d.t.Helper()
	r := d.do("", append([]string{"SET"}, args...)...)
	if string(r.Payload) != "+OK\r\n" {
		d.t.Fatalf("SET %q: %q", args, r.Payload)
	}
	return r.Version
}

// dump describes every live entry, sorted: key, value, version, fence,
// deadline.
func (d *dstore) dump() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var lines []string
	now := d.now()
	for _, e := range d.entries {
		if !e.expires.IsZero() && !now.Before(e.expires) {
			continue
		}
		l := fmt.Sprintf("%s=%q v=%s", e.key, e.value, e.version)
		if e.fenced {
			l += " fence=" + e.fence.String()
		}
		if !e.expires.IsZero() {
			l += " expires=" + e.expires.UTC().Format(time.RFC3339Nano)
		}
		lines = append(lines, l)
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// reopen opens dir again and fails unless it holds want (a dump).
func reopen(t *testing.T, dir string, clk *clockT, want string) *dstore {
	t.Helper()
	d := openDir(t, dir, clk)
	if got := d.dump(); got != want {
		t.Fatalf("recovered\n%s\nwant\n%s", got, want)
	}
	return d
}

// writeAgain sets a new key, closes the store and reopens it: the journal
// must go on cleanly after whatever recovery did to it.
func (d *dstore) writeAgain(dir string) *dstore {
	d.t.Helper()
	d.set("after", "x")
	want := d.dump()
	d.close()
	return reopen(d.t, dir, d.clk, want)
}

// oneKeyDir returns a directory whose journal holds one SET.
func oneKeyDir(t *testing.T) (string, *clockT) {
	t.Helper()
	dir, clk := t.TempDir(), &clockT{t: t0}
	d := openDir(t, dir, clk)
	d.set("a", "1")
	d.close()
	return dir, clk
}

// refuses fails unless opening dir fails with ErrDataCorrupt saying want.
func refuses(t *testing.T, dir string, clk *clockT, want string) {
	t.Helper()
	if _, err := tryOpenDir(t, dir, clk); !errors.Is(err, ErrDataCorrupt) || !strings.Contains(err.Error(), want) {
		t.Fatalf("open: %v\nwant ErrDataCorrupt saying %q", err, want)
	}
}

func segPath(dir string, seq uint64) string { return filepath.Join(dir, segmentName(seq)) }

// frameOffsets returns the offset of every frame in a segment or snapshot.
func frameOffsets(t *testing.T, path string) []int64 {
	t.Helper()
	_, offs, err := fileFrames(path)
	if err != nil {
		t.Fatal(err)
	}
	return offs
}

func readSegmentHeader(t *testing.T, path string) segmentHeader {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	h, err := parseSegmentHeader(b[:min(len(b), segmentHeaderLen)])
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return h
}

// keyedFrame returns r in a frame valid at the end of the segment at path.
func keyedFrame(t *testing.T, path string, r *record) []byte {
	t.Helper()
	h := readSegmentHeader(t, path)
	return appendKeyedFrame(nil, r, h.key(), fileSize(t, path))
}

// emptySegment makes segment seq of dir, holding nothing but its header.
func emptySegment(t *testing.T, dir string, seq uint64) {
	t.Helper()
	f, _, err := createSegment(dir, seq)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// damage rewrites the file at path changed by change, and returns what it
// wrote.
func damage(t *testing.T, path string, change func([]byte)) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	change(b)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return b
}

// appendRecord appends r to the segment at path as the journal would.
func appendRecord(t *testing.T, path string, r *record) {
	t.Helper()
	appendFile(t, path, keyedFrame(t, path, r))
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

func appendFile(t *testing.T, path string, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// Keys, values, exact versions, fencing tokens and deadlines come back;
// deletes stay deleted.
func TestRecoverState(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: t0}
	d := openDir(t, dir, clk)
	d.set("a", "1")
	d.set("bin", "x\r\n\x00y")
	d.set("empty", "")
	lock := d.set("lock", "me", "NEX", "PX", "60000")
	if r := d.do(lock.String(), "SET", "fenced", "v"); string(r.Payload) != "+OK\r\n" {
		t.Fatalf("fenced SET: %q", r.Payload)
	}
	d.set("gone", "x")
	d.do("", "DEL", "gone")
	d.set("vgone", "x")
	d.do("", "VDEL", "vgone", "x")
	d.set("a", "2", "PX", "5000")
	d.set("a", "3") // clears the deadline
	want := d.dump()
	d.close()

	d = reopen(t, dir, clk, want)
	if d.rec.Keys != 5 || d.rec.Segments != 1 || d.rec.Records != 11 || d.rec.Torn != "" {
		t.Fatalf("recovery summary %+v", d.rec)
	}
	if r := d.do("", "SET", "fenced", "late"); string(r.Payload) != "-ERR "+wire.ErrTextMissingFencingToken+"\r\n" {
		t.Fatalf("unfenced SET of a fenced key after recovery: %q", r.Payload)
	}
}

// An incomplete or damaged last record is an interrupted write: it is cut
// off, logged, and the journal goes on after the last good record.
func TestRecoverCutsTornTail(t *testing.T) {
	r := &record{kind: recSet, key: "torn", value: []byte("value"), version: hlc.HLC{Wall: 1, Node: "n"}}
	flip := func(i int) func([]byte) []byte {
		return func(full []byte) []byte {
			b := bytes.Clone(full)
			b[(i+len(b))%len(b)] ^= 0xff
			return b
		}
	}
	for _, tc := range []struct {
		name string
		tail func(full []byte) []byte // full: r framed where it goes
	}{
		{"header cut", func(full []byte) []byte { return full[:5] }},
		{"payload cut", func(full []byte) []byte { return full[:len(full)-2] }},
		{"bad checksum", flip(-1)},
		{"bad length", flip(0)},
		{"bad header checksum", flip(5)},
		{"zeros", func([]byte) []byte { return make([]byte, 4096) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := &clockT{t: t0}
			d := openDir(t, dir, clk)
			d.set("a", "1")
			d.set("b", "2")
			want := d.dump()
			d.close()
			good := fileSize(t, segPath(dir, 1))
			tail := tc.tail(keyedFrame(t, segPath(dir, 1), r))
			appendFile(t, segPath(dir, 1), tail)

			d = reopen(t, dir, clk, want)
			if !strings.Contains(d.rec.Torn, fmt.Sprintf("%s at offset %d (%d bytes)", segPath(dir, 1), good, len(tail))) {
				t.Fatalf("torn tail reported as %q", d.rec.Torn)
			}
			if !strings.Contains(d.log.String(), "cut off an incomplete record") {
				t.Fatalf("not logged: %s", d.log)
			}
			if got := fileSize(t, segPath(dir, 1)); got != good {
				t.Fatalf("segment is %d bytes after recovery, want %d", got, good)
			}
			if d = d.writeAgain(dir); d.rec.Torn != "" {
				t.Fatalf("torn tail again after writing past the cut: %q", d.rec.Torn)
			}
		})
	}
}

// A damaged record followed by valid ones is not an interrupted write: the
// store refuses to open, naming the file and offset, and changes nothing.
func TestRecoverRefusesDamageInTheMiddle(t *testing.T) {
	for _, tc := range []struct {
		name   string
		damage func(b []byte, off int64) // off: offset of the second of three records
		want   string
	}{
		{"payload byte", func(b []byte, off int64) { b[off+keyedFrameHeader+3] ^= 1 }, "damaged record (bad length or checksum), but valid records follow at offset"},
		{"payload checksum", func(b []byte, off int64) { b[off+9] ^= 1 }, "damaged record header (bad length or checksum), but valid records follow at offset"},
		{"length", func(b []byte, off int64) { b[off] ^= 0x40 }, "damaged record header (bad length or checksum), but valid records follow at offset"},
		{"length made short", func(b []byte, off int64) { b[off]-- }, "damaged record header (bad length or checksum), but valid records follow at offset"},
		{"header checksum", func(b []byte, off int64) { b[off+5] ^= 1 }, "damaged record header (bad length or checksum), but valid records follow at offset"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			clk := &clockT{t: t0}
			d := openDir(t, dir, clk)
			d.set("a", "1")
			d.set("b", "2")
			d.set("c", "3")
			d.close()
			path := segPath(dir, 1)
			offs := frameOffsets(t, path)
			b := damage(t, path, func(b []byte) { tc.damage(b, offs[1]) })
			for range 2 { // the refusal changes nothing and releases the lock
				_, err := tryOpenDir(t, dir, clk)
				if !errors.Is(err, ErrDataCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%s at offset %d: ", path, offs[1])) ||
					!strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "refusing to start") {
					t.Fatalf("open: %v\nwant ErrDataCorrupt naming %s, offset %d and %q", err, path, offs[1], tc.want)
				}
				if got, _ := os.ReadFile(path); !bytes.Equal(got, b) {
					t.Fatal("the damaged segment was modified")
				}
			}
		})
	}
	t.Run("record that decodes wrong", func(t *testing.T) {
		dir, clk := oneKeyDir(t)
		// A well-framed record of a kind a journal never holds.
		appendRecord(t, segPath(dir, 1), &record{kind: recEnd, count: 1})
		refuses(t, dir, clk, "unexpected record kind 4")
	})
	t.Run("torn segment followed by records", func(t *testing.T) {
		dir, clk := oneKeyDir(t)
		appendFile(t, segPath(dir, 1), []byte{9, 0, 0})
		emptySegment(t, dir, 2)
		appendRecord(t, segPath(dir, 2), &record{kind: recDelete, key: "a", version: hlc.HLC{Wall: t0.UnixMilli() + 1, Node: nodeID}})
		refuses(t, dir, clk, "later journal segments hold records")
	})
	t.Run("missing segment", func(t *testing.T) {
		dir, clk := oneKeyDir(t)
		for _, seq := range []uint64{2, 3} {
			emptySegment(t, dir, seq)
		}
		if err := os.Remove(segPath(dir, 2)); err != nil {
			t.Fatal(err)
		}
		refuses(t, dir, clk, segmentName(2)+" is missing")
	})
	t.Run("not a journal", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.WriteFile(segPath(dir, 1), []byte("hello, world"), 0o600); err != nil {
			t.Fatal(err)
		}
		refuses(t, dir, &clockT{t: t0}, "not an ssrun journal segment")
	})
}

// A snapshot replaces the journal before it; recovery from snapshot plus
// the newer journal gives the same state; older files are removed.
func TestCompaction(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: t0}
	d := openDir(t, dir, clk)
	for i := range 50 {
		d.set(fmt.Sprintf("k%02d", i), strings.Repeat("v", i))
	}
	lock := d.set("lock", "me", "NEX", "PX", "60000")
	d.do(lock.String(), "SET", "fenced", "v")
	d.set("soon", "x", "PX", "3000")
	d.do("", "DEL", "k00")
	if err := d.compact(); err != nil {
		t.Fatal(err)
	}
	// Changes after the snapshot go to the new segment.
	d.do("", "DEL", "k01")
	d.set("k02", "changed", "PX", "10000")
	d.set("new", "n")
	clk.advance(time.Second)
	want := d.dump()
	d.close()
	names := dirNames(t, dir)
	if want := []string{"LOCK", segmentName(2), snapshotName(2)}; !slices.Equal(names, want) {
		t.Fatalf("files %q, want %q", names, want)
	}

	d = reopen(t, dir, clk, want)
	if d.rec.Snapshot != snapshotName(2) || d.rec.Segments != 1 {
		t.Fatalf("recovery summary %+v", d.rec)
	}
	// A second compaction, and again.
	if err := d.compact(); err != nil {
		t.Fatal(err)
	}
	d.close()
	if names := dirNames(t, dir); !slices.Equal(names, []string{"LOCK", segmentName(3), snapshotName(3)}) {
		t.Fatalf("files %q", names)
	}
	reopen(t, dir, clk, want)
}

// The compaction loop snapshots on its own once a segment passes its size
// limit.
func TestCompactionLoop(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: t0}
	d := openDir(t, dir, clk, func(pc *PersistConfig) { pc.CompactAt = 4096 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.CompactLoop(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()
	// Well past the limit (each record is over 100 bytes), then the loop
	// gets its time: a bound on SETs alone was a bound on the scheduler
	// (it failed on a loaded machine).
	for i := range 1000 {
		d.set(fmt.Sprintf("k%d", i%10), strings.Repeat("x", 100))
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		// Any snapshot: later ones replace the first.
		if snaps, _ := filepath.Glob(filepath.Join(dir, "snapshot-*.snap")); len(snaps) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no snapshot 30 s after the journal passed its limit")
		}
	}
}

// Every state an interrupted compaction can leave recovers to the same
// data: a new segment made but not used, a snapshot half written, a
// snapshot written but the old files not yet removed.
func TestRecoverInterruptedCompaction(t *testing.T) {
	setup := func(t *testing.T) (string, *clockT, string) {
		dir := t.TempDir()
		clk := &clockT{t: t0}
		d := openDir(t, dir, clk)
		for i := range 10 {
			d.set(fmt.Sprintf("k%d", i), "v")
		}
		d.do("", "DEL", "k3")
		want := d.dump()
		d.close()
		return dir, clk, want
	}
	t.Run("new segment not used", func(t *testing.T) {
		dir, clk, want := setup(t)
		emptySegment(t, dir, 2)
		reopen(t, dir, clk, want).writeAgain(dir)
	})
	t.Run("new segment not yet in place", func(t *testing.T) {
		dir, clk, want := setup(t)
		tmp := segPath(dir, 2) + ".tmp"
		if err := os.WriteFile(tmp, []byte("SSR"), 0o600); err != nil {
			t.Fatal(err)
		}
		reopen(t, dir, clk, want).writeAgain(dir)
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("temporary segment left: %v", err)
		}
	})
	t.Run("snapshot half written", func(t *testing.T) {
		dir, clk, want := setup(t)
		tmp := filepath.Join(dir, snapshotName(2)+".tmp")
		if err := os.WriteFile(tmp, []byte(snapshotMagic+"garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
		reopen(t, dir, clk, want)
		if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("temporary snapshot left: %v", err)
		}
	})
	t.Run("old files not removed", func(t *testing.T) {
		dir, clk, want := setup(t)
		old, err := os.ReadFile(segPath(dir, 1))
		if err != nil {
			t.Fatal(err)
		}
		d := openDir(t, dir, clk)
		if err := d.compact(); err != nil {
			t.Fatal(err)
		}
		d.set("k3", "back")
		want = d.dump()
		d.close()
		if err := os.WriteFile(segPath(dir, 1), old, 0o600); err != nil { // as if the removal never happened
			t.Fatal(err)
		}
		reopen(t, dir, clk, want).close()
		if names := dirNames(t, dir); !slices.Equal(names, []string{"LOCK", segmentName(2), snapshotName(2)}) {
			t.Fatalf("files %q", names)
		}
	})
	t.Run("damaged snapshot", func(t *testing.T) {
		dir, clk, _ := setup(t)
		d := openDir(t, dir, clk)
		if err := d.compact(); err != nil {
			t.Fatal(err)
		}
		d.close()
		path := filepath.Join(dir, snapshotName(2))
		damage(t, path, func(b []byte) { b[len(b)/2] ^= 1 })
		refuses(t, dir, clk, path+" at offset ")
	})
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

// The clock goes on above everything in the data even when the wall clock
// stepped back: versions, deletion ticks, fencing tokens, and the
// high-water mark of a snapshot whose keys are gone.
func TestRecoverClockHighWaterMark(t *testing.T) {
	later := func(t *testing.T, v, than hlc.HLC) {
		t.Helper()
		if v.Compare(than) <= 0 || (v.Wall == than.Wall && v.Counter <= than.Counter) {
			t.Fatalf("version %s not above %s", v, than)
		}
	}
	t.Run("journal", func(t *testing.T) {
		dir := t.TempDir()
		clk := &clockT{t: t0}
		d := openDir(t, dir, clk)
		v := d.set("a", "1")
		d.set("b", "1")
		d.do("", "DEL", "b")
		del := d.clock.Now() // the DELETE's tick
		if del.Compare(v) <= 0 {
			t.Fatalf("delete tick %s not above %s", del, v)
		}
		d.close()
		clk.advance(-time.Hour)
		d = openDir(t, dir, clk)
		later(t, d.set("c", "1"), del)
	})
	t.Run("fencing token ahead of the clock", func(t *testing.T) {
		dir := t.TempDir()
		clk := &clockT{t: t0}
		d := openDir(t, dir, clk)
		ft := hlc.HLC{Wall: t0.UnixMilli() + 30_000, Counter: 7, Node: "client"} // within the skew limit
		if r := d.do(ft.String(), "SET", "fenced", "v"); string(r.Payload) != "+OK\r\n" {
			t.Fatalf("fenced SET: %q", r.Payload)
		}
		d.close()
		clk.advance(-time.Hour)
		d = openDir(t, dir, clk)
		later(t, d.set("lock", "me", "NEX"), ft)
	})
	t.Run("snapshot", func(t *testing.T) {
		dir := t.TempDir()
		clk := &clockT{t: t0}
		d := openDir(t, dir, clk)
		d.set("x", "1")
		d.do("", "DEL", "x")
		del := d.clock.Now()
		if err := d.compact(); err != nil {
			t.Fatal(err)
		}
		d.close()
		clk.advance(-time.Hour)
		d = openDir(t, dir, clk)
		if d.rec.Keys != 0 || d.rec.Records != 0 {
			t.Fatalf("recovery summary %+v", d.rec)
		}
		later(t, d.set("y", "1"), del)
		// Ticks too: a deletion's version.
		d.do("", "DEL", "y")
		later(t, d.clock.Now(), del)
	})
}

// Deadlines come back: an entry that expired while the store was down is
// deleted at open (and stays deleted even if the clock steps back), the
// others expire later and notify.
func TestRecoverExpiry(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: t0}
	d := openDir(t, dir, clk)
	d.set("short", "1", "PX", "1000")
	d.set("long", "2", "PX", "5000")
	d.set("none", "3")
	d.close()

	clk.advance(2 * time.Second)
	d = openDir(t, dir, clk)
	if d.rec.Expired != 1 || d.rec.Keys != 2 {
		t.Fatalf("recovery summary %+v", d.rec)
	}
	if r := d.do("", "GET", "short"); string(r.Payload) != "$-1\r\n" {
		t.Fatalf("GET short: %q", r.Payload)
	}
	d.keyNotify(d.o, []byte("long"))
	clk.advance(2999 * time.Millisecond)
	d.mu.Lock()
	next, ok := d.reapDue(d.now())
	d.mu.Unlock()
	if !ok || next != time.Millisecond {
		t.Fatalf("next deadline in %v (%v), want 1ms", next, ok)
	}
	clk.advance(time.Millisecond)
	d.mu.Lock()
	d.reapDue(d.now())
	d.mu.Unlock()
	if got := d.o.ops(); got != "long DELETE" {
		t.Fatalf("notifications %q, want long DELETE", got)
	}
	d.close()

	clk.advance(-time.Hour) // the deletions were journaled: nothing comes back
	d = openDir(t, dir, clk)
	if got := d.dump(); !strings.HasPrefix(got, `none="3"`) || strings.Contains(got, "\n") {
		t.Fatalf("recovered %q, want only none", got)
	}
}

// One store per directory.
func TestDataDirLock(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: t0}
	d := openDir(t, dir, clk)
	_, err := tryOpenDir(t, dir, clk)
	if !errors.Is(err, ErrDataLocked) || !strings.Contains(err.Error(), filepath.Join(dir, "LOCK")) {
		t.Fatalf("second open: %v", err)
	}
	d.close()
	openDir(t, dir, clk).close()
}
