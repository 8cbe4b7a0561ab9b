package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// segmentFrames returns the bytes of every whole frame of a segment or
// snapshot that ends cleanly: what someone who can read the file could
// copy into a value.
func segmentFrames(t *testing.T, path string) [][]byte {
	t.Helper()
	frames, _, err := fileFrames(path)
	if err != nil {
		t.Fatal(err)
	}
	return frames
}

// repeatFrames concatenates frames, once and again until at least n bytes.
func repeatFrames(frames [][]byte, n int) []byte {
	var v []byte
	for {
		for _, f := range frames {
			v = append(v, f...)
		}
		if len(v) >= n {
			return v
		}
	}
}

// tornAt writes b[:cut] as segment seq of a new directory holding a copy of
// the other files of dir (a snapshot), as a crash in the middle of the
// write of the last record would leave it.
func tornAt(t *testing.T, dir string, seq uint64, b []byte, cut int) string {
	t.Helper()
	to := t.TempDir()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, de := range des {
		if name := de.Name(); name != "LOCK" && name != segmentName(seq) {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(to, name), data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := os.WriteFile(segPath(to, seq), b[:cut], 0o600); err != nil {
		t.Fatal(err)
	}
	return to
}

// setEvil sets key evil to value as the last write to segment seq of dir,
// closes d, and returns the segment's bytes and the offsets of evil's
// record and of its value.
func setEvil(t *testing.T, d *dstore, dir string, seq uint64, value []byte) (b []byte, evilAt, valueAt int) {
	t.Helper()
	d.set("evil", string(value))
	d.close()
	b, err := os.ReadFile(segPath(dir, seq))
	if err != nil {
		t.Fatal(err)
	}
	offs := frameOffsets(t, segPath(dir, seq))
	evilAt = int(offs[len(offs)-1])
	return b, evilAt, bytes.Index(b[evilAt:], value) + evilAt
}

// recoversCut fails unless dir recovers to want with the record at evilAt
// of segment seq cut off as a torn tail, and the journal goes on after it.
func recoversCut(t *testing.T, dir string, seq uint64, clk *clockT, want string, evilAt int) *dstore {
	t.Helper()
	d := reopen(t, dir, clk, want)
	if !strings.Contains(d.rec.Torn, fmt.Sprintf("%s at offset %d ", segPath(dir, seq), evilAt)) {
		t.Fatalf("torn tail reported as %q, want the record at offset %d", d.rec.Torn, evilAt)
	}
	if got := fileSize(t, segPath(dir, seq)); got != int64(evilAt) {
		t.Fatalf("segment is %d bytes after recovery, want %d", got, evilAt)
	}
	return d.writeAgain(dir)
}

// A record cut short by a crash is an interrupted write even when its
// value, which a client chooses, is made of valid journal frames: recovery
// cuts it off and keeps everything before it. The repro, then
// values of nothing but frames cut at every kind of place: in the record's
// header, at a frame boundary inside the value, in the middle of a frame.
func TestRecoverTornValueOfFrames(t *testing.T) {
	t.Run("issue repro", func(t *testing.T) {
		dir, clk := oneKeyDir(t) // a=1
		d := openDir(t, dir, clk)
		d.set("k1", "a")
		frames := segmentFrames(t, segPath(dir, 1))
		k1 := frames[len(frames)-1]
		want := d.dump()
		evil := strings.Repeat("A", 2000) + string(k1) + strings.Repeat("B", 2000)
		b, evilAt, _ := setEvil(t, d, dir, 1, []byte(evil))
		if err := os.Truncate(segPath(dir, 1), int64(len(b)-1000)); err != nil {
			t.Fatal(err)
		}
		recoversCut(t, dir, 1, clk, want, evilAt)
	})

	// One directory whose last record's value is the frames of every
	// earlier record, repeated to 64 KiB; copies of it cut at each place.
	dir, clk := oneKeyDir(t)
	d := openDir(t, dir, clk)
	d.set("b", "2", "PX", "60000")
	lock := d.set("lock", "me", "NEX")
	d.do(lock.String(), "SET", "fenced", "x")
	d.do("", "DEL", "a")
	want := d.dump()
	unit := repeatFrames(segmentFrames(t, segPath(dir, 1)), 0)
	first := len(segmentFrames(t, segPath(dir, 1))[0])
	b, evilAt, v := setEvil(t, d, dir, 1, repeatFrames(segmentFrames(t, segPath(dir, 1)), 64<<10))
	for _, cut := range []struct {
		name string
		at   int
	}{
		{"in the header", evilAt + 3},
		{"before the value", v},
		{"after one frame of the value", v + first},
		{"after a run of whole frames", v + len(unit)},
		{"after many runs", v + 10*len(unit)},
		{"in a frame", v + 10*len(unit) + first/2},
		{"one byte short", len(b) - 1},
	} {
		t.Run(cut.name, func(t *testing.T) {
			recoversCut(t, tornAt(t, dir, 1, b, cut.at), 1, clk, want, evilAt)
		})
	}
}

// The same across segments: a value made of the frames of an older
// segment (gone since), of the snapshot that replaced it and of the
// current segment, written to the current segment and cut.
func TestRecoverTornValueOfFramesAcrossSegments(t *testing.T) {
	dir := t.TempDir()
	clk := &clockT{t: t0}
	d := openDir(t, dir, clk)
	for i := range 5 {
		d.set(fmt.Sprintf("k%d", i), strings.Repeat("v", i))
	}
	old := segmentFrames(t, segPath(dir, 1))
	if err := d.compact(); err != nil {
		t.Fatal(err)
	}
	d.set("k5", "after the snapshot")
	d.do("", "DEL", "k0")
	want := d.dump()
	frames := append(append(old, segmentFrames(t, filepath.Join(dir, snapshotName(2)))...), segmentFrames(t, segPath(dir, 2))...)
	value := repeatFrames(frames, 256<<10)
	b, evilAt, v := setEvil(t, d, dir, 2, value)
	for _, at := range []int{v, v + len(old[0]), v + len(value)/2, len(b) - 1} {
		if d := recoversCut(t, tornAt(t, dir, 2, b, at), 2, clk, want, evilAt); d.rec.Snapshot != snapshotName(2) {
			t.Fatalf("cut at %d: recovered from snapshot %q, want %s", at, d.rec.Snapshot, snapshotName(2))
		}
	}
}

// A segment shorter than its header lost what it held: recovery refuses,
// naming the file and offset, instead of starting without it. Segments are
// put in place only once their header is on disk, so no crash leaves one.
func TestRecoverRefusesShortSegment(t *testing.T) {
	twenty := func(t *testing.T) (string, *clockT) {
		dir := t.TempDir()
		clk := &clockT{t: t0}
		d := openDir(t, dir, clk)
		for i := range 20 {
			d.set(fmt.Sprintf("k%d", i), "v")
		}
		d.close()
		return dir, clk
	}
	shortened := func(t *testing.T, dir string, clk *clockT, seq uint64, size int64) {
		t.Helper()
		path := segPath(dir, seq)
		if err := os.Truncate(path, size); err != nil {
			t.Fatal(err)
		}
		for range 2 { // the refusal changes nothing
			refuses(t, dir, clk, fmt.Sprintf("%s at offset %d: journal segment shorter than its header", path, size))
			if got := fileSize(t, path); got != size {
				t.Fatalf("%s is %d bytes after the refusal, was %d", path, got, size)
			}
		}
	}
	t.Run("the only segment, empty", func(t *testing.T) {
		dir, clk := twenty(t)
		shortened(t, dir, clk, 1, 0)
	})
	t.Run("the only segment, part of its header", func(t *testing.T) {
		dir, clk := twenty(t)
		shortened(t, dir, clk, 1, 5)
	})
	t.Run("the segment after a snapshot", func(t *testing.T) {
		dir, clk := twenty(t)
		d := openDir(t, dir, clk)
		if err := d.compact(); err != nil {
			t.Fatal(err)
		}
		for i := range 20 {
			d.set(fmt.Sprintf("after%d", i), "v")
		}
		d.close()
		shortened(t, dir, clk, 2, 0)
	})
	t.Run("an older segment", func(t *testing.T) {
		dir, clk := twenty(t)
		emptySegment(t, dir, 2)
		shortened(t, dir, clk, 1, 0)
	})
	t.Run("the newest segment, empty", func(t *testing.T) {
		dir, clk := twenty(t)
		emptySegment(t, dir, 2)
		shortened(t, dir, clk, 2, 0)
	})
}

// format1Dir copies testdata/journal-format1 (written by ssrun before
// journal format 2: a snapshot and a segment after it) to a new directory
// and returns it with the state it holds.
func format1Dir(t *testing.T) (string, string) {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{segmentName(2), snapshotName(2)} {
		b, err := os.ReadFile(filepath.Join("testdata", "journal-format1", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(filepath.Join("testdata", "journal-format1", "want.txt"))
	if err != nil {
		t.Fatal(err)
	}
	return dir, string(want)
}

// A directory written before journal format 2 recovers as before (its
// format 1 segment by the rule of format 1); new records go to a new
// segment of format 2, and the next snapshot replaces the old one.
func TestRecoverFormat1(t *testing.T) {
	clk := &clockT{t: t0}
	t.Run("intact", func(t *testing.T) {
		dir, want := format1Dir(t)
		old, err := os.ReadFile(segPath(dir, 2))
		if err != nil {
			t.Fatal(err)
		}
		d := reopen(t, dir, clk, want)
		if got, _ := os.ReadFile(segPath(dir, 2)); !bytes.Equal(got, old) {
			t.Fatal("the format 1 segment was changed")
		}
		if h := readSegmentHeader(t, segPath(dir, 3)); h.version != 2 || h.seq != 3 {
			t.Fatalf("new segment header %+v, want format 2, segment 3", h)
		}
		if !strings.Contains(d.log.String(), "older format") {
			t.Fatalf("the move to a new segment is not logged: %s", d.log)
		}
		d = d.writeAgain(dir)
		if err := d.compact(); err != nil {
			t.Fatal(err)
		}
		want = d.dump()
		d.close()
		if names := dirNames(t, dir); !slices.Equal(names, []string{"LOCK", segmentName(4), snapshotName(4)}) {
			t.Fatalf("files %q after a snapshot", names)
		}
		reopen(t, dir, clk, want)
	})
	t.Run("torn tail", func(t *testing.T) {
		dir, want := format1Dir(t)
		good := fileSize(t, segPath(dir, 2))
		full := appendFrame(nil, &record{kind: recSet, key: "torn", value: []byte("value"), version: hlc.HLC{Wall: 1, Node: "n"}})
		appendFile(t, segPath(dir, 2), full[:len(full)-3])
		d := reopen(t, dir, clk, want)
		if !strings.Contains(d.rec.Torn, fmt.Sprintf("%s at offset %d ", segPath(dir, 2), good)) {
			t.Fatalf("torn tail reported as %q", d.rec.Torn)
		}
		if got := fileSize(t, segPath(dir, 2)); got != good {
			t.Fatalf("format 1 segment is %d bytes after recovery, want %d", got, good)
		}
		d.writeAgain(dir)
	})
	t.Run("damage in the middle", func(t *testing.T) {
		dir, _ := format1Dir(t)
		path := segPath(dir, 2)
		damage(t, path, func(b []byte) { b[magicLen+frameHeader+2] ^= 1 })
		refuses(t, dir, clk, fmt.Sprintf("%s at offset %d: damaged record (bad length or checksum), but valid records follow", path, magicLen))
	})
}

// Even a value holding a frame valid at its very place (made with the
// segment's nonce, which no client can know) does not stop recovery when
// the write of its record is cut short: the record's header checks, so
// the file ends inside that record, and nothing inside it is looked at.
func TestRecoverTornValueHoldingAFrameValidInPlace(t *testing.T) {
	dir, clk := oneKeyDir(t)
	path := segPath(dir, 1)
	d := openDir(t, dir, clk)
	want := d.dump()
	d.close()
	evilAt := fileSize(t, path)
	h := readSegmentHeader(t, path)
	inner := &record{kind: recSet, key: "planted", value: []byte("x"), version: hlc.HLC{Wall: t0.UnixMilli(), Node: nodeID}}
	// The value's offset in the file: the record's header, kind, key and
	// the value's length come first.
	value := make([]byte, 10_000)
	r := record{kind: recSet, key: "evil", value: value, version: hlc.HLC{Wall: t0.UnixMilli(), Node: nodeID}}
	key := h.key()
	frame := appendKeyedFrame(nil, &r, key, evilAt)
	valueAt := evilAt + int64(bytes.Index(frame[keyedFrameHeader:], value)) + keyedFrameHeader
	planted := appendKeyedFrame(nil, inner, key, valueAt)
	copy(value, planted)
	frame = appendKeyedFrame(nil, &r, key, evilAt)
	appendFile(t, path, frame[:valueAt-evilAt+int64(len(planted))+5])

	if i := nextKeyedFrame(frame[1:], evilAt+1, key); int64(i) != valueAt-evilAt-1 {
		t.Fatalf("the planted frame is not valid at %d (found at %d): the test proves nothing", valueAt, evilAt+1+int64(i))
	}
	recoversCut(t, dir, 1, clk, want, int(evilAt))
}

// A segment's header is checked: damage in it, or a segment under another
// segment's name, is refused.
func TestRecoverRefusesBadSegmentHeader(t *testing.T) {
	t.Run("damaged nonce", func(t *testing.T) {
		dir, clk := oneKeyDir(t)
		damage(t, segPath(dir, 1), func(b []byte) { b[magicLen+8] ^= 1 })
		refuses(t, dir, clk, segPath(dir, 1)+" at offset 0: damaged journal segment header")
	})
	t.Run("another segment's file", func(t *testing.T) {
		dir, clk := oneKeyDir(t)
		emptySegment(t, dir, 2)
		if err := os.Rename(segPath(dir, 1), segPath(dir, 2)); err != nil {
			t.Fatal(err)
		}
		emptySegment(t, dir, 1)
		refuses(t, dir, clk, segPath(dir, 2)+" at offset 8: the segment's header says it is segment 1")
	})
}

// replayFile replays the segment file path (segment 1) into a new store.
func replayFile(path string) (segmentReplay, error) {
	rp := &replayer{s: New(time.Now, Quota{Keys: -1, Bytes: -1})}
	return rp.replaySegment(path, 1)
}

// fuzzSegment is a segment (number 1, fuzzNonce) holding records, and the
// offset of each.
func fuzzSegment(records ...*record) ([]byte, []int64) {
	b := appendSegmentHeader(nil, 1, fuzzNonce)
	var offs []int64
	for _, r := range records {
		offs = append(offs, int64(len(b)))
		b = appendKeyedFrame(b, r, newFrameKey(fuzzNonce), int64(len(b)))
	}
	return b, offs
}

// FuzzTornTail: whatever the value of the last record and wherever its
// write is cut short, recovery keeps the records before it and cuts it
// off; it never refuses.
func FuzzTornTail(f *testing.F) {
	v := hlc.HLC{Wall: 1_700_000_000_000, Node: nodeID}
	before := []*record{
		{kind: recSet, key: "k1", value: []byte("a"), version: v},
		{kind: recSet, key: "k2", value: []byte("b"), version: v, expires: 1, fenced: true, fence: v},
		{kind: recDelete, key: "k1", version: v},
	}
	seg, _ := fuzzSegment(before...)
	frames := seg[segmentHeaderLen:]
	var snapFrames []byte
	for _, r := range before {
		snapFrames = appendFrame(snapFrames, r)
	}
	f.Add([]byte("short"), uint32(7))
	f.Add([]byte(strings.Repeat("A", 2000)+string(frames)+strings.Repeat("B", 2000)), uint32(3000))
	f.Add(bytes.Repeat(frames, 20), uint32(len(frames)*5+40))
	f.Add(bytes.Repeat(snapFrames, 20), uint32(len(snapFrames)*5+40))
	f.Add(bytes.Repeat(seg, 5), uint32(len(seg)*3+38))
	dir := f.TempDir()
	path := filepath.Join(dir, segmentName(1))
	f.Fuzz(func(t *testing.T, value []byte, cut uint32) {
		last := &record{kind: recSet, key: "evil", value: value, version: v}
		b, offs := fuzzSegment(append(before, last)...)
		at := offs[len(offs)-1]
		b = b[:at+int64(cut)%(int64(len(b))-at)]
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		sr, err := replayFile(path)
		if err != nil || sr.end != at || sr.records != len(before) {
			t.Fatalf("cut at %d of the record at %d: recovery ends at %d with %d records (%v), want %d records", len(b), at, sr.end, sr.records, err, len(before))
		}
	})
}

// FuzzRecoverSegment replays arbitrary data after a segment's header (of
// format 2, or 1): no panic; it recovers or refuses with ErrDataCorrupt;
// what it recovers ends within the file, and, cut there, reads back whole
// with the same records. And arbitrary bytes as a segment header: parsed
// only if they re-encode.
func FuzzRecoverSegment(f *testing.F) {
	v := hlc.HLC{Wall: 1_700_000_000_000, Node: nodeID}
	records := []*record{{kind: recSet, key: "k", value: []byte("v"), version: v},
		{kind: recDelete, key: "k", version: v}, {kind: recSet, key: "k2", value: []byte("xyz"), version: v}}
	seg, _ := fuzzSegment(records...)
	var v1 []byte
	for _, r := range records {
		v1 = appendFrame(v1, r)
	}
	for _, body := range [][]byte{seg[segmentHeaderLen:], v1} {
		format1 := len(body) == len(v1)
		f.Add(format1, body)
		f.Add(format1, body[:len(body)-4])
		f.Add(format1, append(bytes.Clone(body[:20]), body[25:]...))
		f.Add(format1, append(make([]byte, 16), body...))
	}
	f.Add(false, seg[:segmentHeaderLen])
	dir := f.TempDir()
	path := filepath.Join(dir, segmentName(1))
	f.Fuzz(func(t *testing.T, format1 bool, data []byte) {
		if h, err := parseSegmentHeader(data[:min(len(data), segmentHeaderLen)]); err == nil && h.version == 2 &&
			!bytes.Equal(appendSegmentHeader(nil, h.seq, &h.nonce), data[:segmentHeaderLen]) {
			t.Fatalf("header %x parsed as %+v", data[:segmentHeaderLen], h)
		}
		b := append(bytes.Clone(seg[:segmentHeaderLen]), data...)
		if format1 {
			b = append([]byte(segmentMagicV1), data...)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		sr, err := replayFile(path)
		if err != nil {
			if !errors.Is(err, ErrDataCorrupt) {
				t.Fatalf("refused without ErrDataCorrupt: %v", err)
			}
			return
		}
		if sr.end < sr.header.size() || sr.end > int64(len(b)) || (sr.cut == nil) != (sr.end == int64(len(b))) {
			t.Fatalf("recovery of %d bytes ends at %d, cut %v", len(b), sr.end, sr.cut)
		}
		if err := os.WriteFile(path, b[:sr.end], 0o600); err != nil {
			t.Fatal(err)
		}
		again, err := replayFile(path)
		if err != nil || again.cut != nil || again.end != sr.end || again.records != sr.records {
			t.Fatalf("the recovered prefix replays as %+v (%v), first %+v", again, err, sr)
		}
	})
}
