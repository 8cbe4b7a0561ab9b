package store

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// gate is a sync function that blocks until released and counts calls.
type gate struct {
	mu      sync.Mutex
	calls   int
	entered chan struct{} // receives on each call
	release chan error    // each call returns what it receives
}

func newGate() *gate {
	return &gate{entered: make(chan struct{}, 16), release: make(chan error)}
}

func (g *gate) sync(*os.File) error {
	g.mu.Lock()
	g.calls++
	g.mu.Unlock()
	g.entered <- struct{}{}
	return <-g.release
}

func (g *gate) count() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.calls
}

func (g *gate) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the syncer never called fsync")
	}
}

// waitResult waits for a waitDurable result.
func waitResult(t *testing.T, c <-chan error) error {
	t.Helper()
	select {
	case err := <-c:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("waitDurable did not return")
		return nil
	}
}

func startWait(j *journal, pos uint64) <-chan error {
	c := make(chan error, 1)
	go func() { c <- j.waitDurable(pos, nil) }()
	return c
}

func testRecord(key string) *record {
	return &record{kind: recSet, key: key, value: []byte("v"), version: hlc.HLC{Wall: 1, Node: nodeID}}
}

// Under FsyncAlways nothing is durable before its fsync returns, and the
// records appended while one fsync runs share the next one.
func TestJournalGroupCommit(t *testing.T) {
	dir := t.TempDir()
	d := openDir(t, dir, &clockT{t: t0})
	g := newGate()
	j := d.j
	j.mu.Lock()
	j.syncFile = g.sync
	j.mu.Unlock()

	p1, err := j.append(testRecord("a"))
	if err != nil || p1 == 0 {
		t.Fatalf("append: %d, %v", p1, err)
	}
	w1 := startWait(j, p1)
	g.waitEntered(t) // the fsync covering a is running
	p2, _ := j.append(testRecord("b"))
	p3, _ := j.append(testRecord("c"))
	w3 := startWait(j, p3)
	select {
	case err := <-w1:
		t.Fatalf("record a reported durable (%v) while its fsync had not returned", err)
	default:
	}
	if pos := j.position(); pos != p3 || p3 <= p2 || p2 <= p1 {
		t.Fatalf("positions %d %d %d, journal end %d", p1, p2, p3, pos)
	}
	g.release <- nil
	if err := waitResult(t, w1); err != nil {
		t.Fatal(err)
	}
	g.waitEntered(t) // one fsync for b and c
	select {
	case err := <-w3:
		t.Fatalf("record c reported durable (%v) before its fsync returned", err)
	default:
	}
	g.release <- nil
	if err := waitResult(t, w3); err != nil {
		t.Fatal(err)
	}
	if err := j.waitDurable(p2, nil); err != nil {
		t.Fatal(err)
	}
	if n := g.count(); n != 2 {
		t.Fatalf("%d fsyncs for 3 records appended around one running fsync, want 2", n)
	}
	j.mu.Lock()
	j.syncFile = (*os.File).Sync
	j.mu.Unlock()
	d.close()
}

// FsyncInterval and FsyncNever make nothing wait: positions are 0.
func TestJournalPoliciesThatDoNotWait(t *testing.T) {
	for _, p := range []FsyncPolicy{FsyncInterval, FsyncNever} {
		d := openDir(t, t.TempDir(), &clockT{t: t0}, func(pc *PersistConfig) { pc.Policy = p; pc.Interval = time.Hour })
		pos, err := d.j.append(testRecord("a"))
		if err != nil || pos != 0 || d.j.position() != 0 {
			t.Fatalf("%v: append at %d (%v), position %d; want 0", p, pos, err, d.j.position())
		}
		d.close()
	}
}

// A failed fsync stops the journal: waiters get the error, later changes
// are refused with an -ERR, the failure is reported once on fatal.
func TestJournalFailureStopsChanges(t *testing.T) {
	d := openDir(t, t.TempDir(), &clockT{t: t0})
	g := newGate()
	d.j.mu.Lock()
	d.j.syncFile = g.sync
	d.j.mu.Unlock()
	o := &recorder{id: "w"}
	d.keyNotify(o, []byte("a"))
	r := d.do("", "SET", "a", "1")
	if string(r.Payload) != "+OK\r\n" {
		t.Fatalf("SET: %q", r.Payload)
	}
	w := startWait(d.j, d.replyPos())
	g.waitEntered(t)
	g.release <- errors.New("EIO")
	if err := waitResult(t, w); err == nil || !strings.Contains(err.Error(), "EIO") {
		t.Fatalf("waiter got %v, want the fsync error", err)
	}
	if err := d.WaitDurable(o.notes[0].Pos, nil); err == nil {
		t.Fatal("the notification of the failed change counts as durable")
	}
	select {
	case err := <-d.j.fatal:
		if !strings.Contains(err.Error(), "EIO") {
			t.Fatalf("fatal: %v", err)
		}
	default:
		t.Fatal("failure not reported on fatal")
	}
	for _, args := range [][]string{{"SET", "b", "2"}, {"DEL", "a"}} {
		if r := d.do("", args...); string(r.Payload) != "-ERR "+errTextNotPersisted+"\r\n" {
			t.Fatalf("%q after the failure: %q", args, r.Payload)
		}
	}
	if r := d.do("", "GET", "b"); string(r.Payload) != "$-1\r\n" {
		t.Fatalf("the refused SET was applied: %q", r.Payload)
	}
	if !strings.Contains(d.log.String(), "state store journal failed") {
		t.Fatalf("failure not logged: %s", d.log)
	}
	if err := d.Close(); err == nil {
		t.Fatal("close after a failure reports nothing")
	}
}

func TestParseFsyncPolicy(t *testing.T) {
	for _, p := range []FsyncPolicy{FsyncAlways, FsyncInterval, FsyncNever} {
		got, err := ParseFsyncPolicy(strings.ToUpper(p.String()))
		if err != nil || got != p {
			t.Fatalf("%s: %v %v", p, got, err)
		}
	}
	if _, err := ParseFsyncPolicy("sometimes"); err == nil || !strings.Contains(err.Error(), "always, interval or never") {
		t.Fatalf("bad policy: %v", err)
	}
}

// recordSeeds are one record of each kind, with edge values.
func recordSeeds() []record {
	v := hlc.HLC{Wall: 1_700_000_000_000, Counter: 3, Node: nodeID}
	return []record{
		{kind: recSet, key: "k", value: []byte("v"), version: v},
		{kind: recSet, key: "bin\x00\r\n", value: []byte{}, version: v, expires: 1_700_000_001_000_000_000,
			fenced: true, fence: hlc.HLC{Wall: 1<<63 - 1, Counter: hlc.MaxCounter, Node: "0193-client"}},
		{kind: recSet, key: strings.Repeat("k", 300), value: bytes.Repeat([]byte("v"), 70_000), version: v, expires: -1},
		{kind: recDelete, key: "k", version: v},
		{kind: recClock, version: v},
		{kind: recEnd, count: 1 << 40},
	}
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range recordSeeds() {
		b := appendFrame(nil, &r)
		fr := newFrameReader(bytes.NewReader(b), 0, nil)
		p, off, err := fr.next()
		if err != nil || off != 0 {
			t.Fatalf("kind %d: frame: %v", r.kind, err)
		}
		got, err := decodeRecord(p)
		if err != nil {
			t.Fatalf("kind %d: decode: %v", r.kind, err)
		}
		if !recordsEqual(got, r) {
			t.Fatalf("round trip\n%+v\nwant\n%+v", got, r)
		}
	}
}

func recordsEqual(a, b record) bool {
	return a.kind == b.kind && a.key == b.key && bytes.Equal(a.value, b.value) && a.version == b.version &&
		a.expires == b.expires && a.fenced == b.fenced && a.fence == b.fence && a.count == b.count
}

func TestDecodeRecordIsStrict(t *testing.T) {
	valid := appendFrame(nil, &recordSeeds()[0])[frameHeader:]
	for _, tc := range []struct {
		name    string
		payload []byte
		want    string
	}{
		{"empty", nil, "truncated"},
		{"unknown kind", []byte{9}, "unknown kind 9"},
		{"trailing byte", append(bytes.Clone(valid), 0), "1 bytes after the last field"},
		{"cut", valid[:len(valid)-1], "truncated"},
		{"value past the end", valid[:4], "length past the end"},
		{"empty key", []byte{recDelete, 0, 1, 0, 1, 'n'}, "empty key"},
		{"empty node", []byte{recClock, 1, 0, 0}, "invalid HLC"},
		{"node with colon", []byte{recClock, 1, 0, 1, ':'}, "invalid HLC"},
		{"counter too big", append([]byte{recClock, 1, 0x80, 0x80, 0x80, 0x80, 0x08}, 1, 'n'), "invalid HLC"},
		{"fence flag 2", append(bytes.Clone(valid[:len(valid)-1]), 2), "fence flag"},
	} {
		if _, err := decodeRecord(tc.payload); !errors.Is(err, errRecord) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// fuzzNonce is the nonce of the keyed frames in the fuzz targets.
var fuzzNonce = &[8]byte{0x5e, 0x9a, 0x11, 0x07, 0xc3, 0x42, 0xee, 0x01}

// FuzzJournal feeds arbitrary bytes to the record decoder, directly and
// through both frame readers as recovery does (snapshot frames, and a
// segment's keyed frames): they must never panic, and every record they
// accept must encode back to the same bytes (the encoding is canonical, so
// a record has one valid form). The scans recovery makes after damage must
// agree with the readers: a frame they find reads back at its place.
func FuzzJournal(f *testing.F) {
	var all, keyed []byte
	for _, r := range recordSeeds() {
		if len(r.value) > 1000 {
			continue // small inputs keep the fuzzer fast
		}
		fr := appendFrame(nil, &r)
		f.Add(fr)
		f.Add(fr[frameHeader:])
		f.Add(fr[:len(fr)-1])
		all = append(all, fr...)
		kf := appendKeyedFrame(nil, &r, newFrameKey(fuzzNonce), 0)
		f.Add(kf)
		f.Add(kf[:len(kf)-1])
		keyed = appendKeyedFrame(keyed, &r, newFrameKey(fuzzNonce), int64(len(keyed)))
	}
	f.Add(all)
	f.Add(keyed)
	f.Add(append(append([]byte{}, keyed[:len(keyed)-3]...), keyed...))
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip := func(p []byte) {
			r, err := decodeRecord(p)
			if err != nil {
				return
			}
			if again := appendFrame(nil, &r); !bytes.Equal(again[frameHeader:], p) {
				t.Fatalf("record %+v re-encodes to %x, was %x", r, again[frameHeader:], p)
			}
		}
		roundTrip(b)
		for _, key := range []*frameKey{nil, newFrameKey(fuzzNonce)} {
			fr := newFrameReader(bytes.NewReader(b), 0, key)
			for {
				p, off, err := fr.next()
				if err != nil {
					from := min(int(off)+1, len(b))
					if key == nil {
						if i := nextValidFrame(b[from:]); i >= 0 {
							readsAt(t, b, from+i, nil)
						}
					} else if i := nextKeyedFrame(b[from:], int64(from), key); i >= 0 {
						readsAt(t, b, from+i, key)
					}
					break
				}
				roundTrip(p)
			}
		}
	})
}

// readsAt fails unless a frame reader finds a valid frame at offset at of b.
func readsAt(t *testing.T, b []byte, at int, key *frameKey) {
	t.Helper()
	if _, _, err := newFrameReader(bytes.NewReader(b[at:]), int64(at), key).next(); err != nil {
		t.Fatalf("the scan found a frame at %d that does not read (%v)", at, err)
	}
}
