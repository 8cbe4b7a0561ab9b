package store

import (
	"container/heap"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// This file opens a data directory and rebuilds the store from it (design
// in persist.go): the newest snapshot, then every journal segment from the
// snapshot's number on, in order.

// Recovery summarises what openData found, for the start-up log.
type Recovery struct {
	Snapshot string        // file loaded, "" if none
	Segments int           // journal segments replayed
	Records  int           // records applied (snapshot and journal)
	Keys     int           // live keys after recovery
	Expired  int           // keys whose deadline passed while the broker was down
	Torn     string        // "file at offset N (M bytes)" when an interrupted write was cut off
	Clock    hlc.HLC       // the clock after recovery
	Took     time.Duration // how long recovery took
}

// dataFiles are the numbered files of a data directory, ascending.
type dataFiles struct {
	snapshots []uint64
	segments  []uint64
}

// restoreNode is the node id under which the recovered high-water mark is
// folded into the clock (the clock ignores values from its own node).
const restoreNode = "recovered"

// OpenData locks the directory, rebuilds the store from it and starts the
// journal. The store must be new and not yet shared.
func (s *Store) OpenData(pc PersistConfig) (rec Recovery, err error) {
	t0 := time.Now()
	if pc.CompactAt <= 0 {
		pc.CompactAt = DefaultSnapshotBytes
	}
	if err := makeDir(pc.Dir); err != nil {
		return rec, err
	}
	lock, err := lockDir(pc.Dir)
	if err != nil {
		return rec, err
	}
	defer func() {
		if err != nil {
			_ = lock.Release()
		}
	}()
	files, err := listData(pc.Dir)
	if err != nil {
		return rec, err
	}
	rp := &replayer{s: s}
	var first uint64 = 1 // the first segment to replay
	if n := len(files.snapshots); n > 0 {
		first = files.snapshots[n-1]
		rec.Snapshot = snapshotName(first)
		if err := rp.loadSnapshot(filepath.Join(pc.Dir, rec.Snapshot)); err != nil {
			return rec, err
		}
	}
	var segs []uint64
	for _, seq := range files.segments {
		if seq >= first {
			segs = append(segs, seq)
		}
	}
	for i, seq := range segs {
		if seq != first+uint64(i) {
			return rec, fmt.Errorf("%w: %s: journal segment %s is missing (segments must follow the snapshot without gaps)",
				ErrDataCorrupt, pc.Dir, segmentName(first+uint64(i)))
		}
	}
	if len(segs) == 0 && rec.Snapshot != "" {
		return rec, fmt.Errorf("%w: %s: journal segment %s is missing (it is created before snapshot %s)",
			ErrDataCorrupt, pc.Dir, segmentName(first), rec.Snapshot)
	}

	// Replay; find where each segment's valid data ends.
	reps := make([]segmentReplay, len(segs))
	for i, seq := range segs {
		if reps[i], err = rp.replaySegment(filepath.Join(pc.Dir, segmentName(seq)), seq); err != nil {
			return rec, err
		}
	}
	if err := checkCuts(reps, pc.Log, &rec); err != nil {
		return rec, err
	}
	rec.Segments = len(segs)
	rec.Records = rp.records
	rp.finish()

	// Cut what was cut off out of every segment but the last, which is
	// opened for appending at its valid end; unless it is of format 1
	// (never appended to), or there is none: then a new one is made.
	var f *os.File
	var seq uint64
	var key *frameKey
	size := int64(segmentHeaderLen)
	last := len(reps) - 1
	for i := range reps {
		if i == last && reps[i].header.version != 1 {
			seq, key, size = segs[i], reps[i].header.key(), reps[i].end
			if f, err = openSegmentForAppend(reps[i].path, size); err != nil {
				return rec, err
			}
		} else if err := cutSegment(reps[i].path, reps[i].end); err != nil {
			return rec, err
		}
	}
	if f == nil {
		seq = first
		if last >= 0 {
			seq = segs[last] + 1
			pc.Log.Info("state store journal: the last segment is of an older format; new records go to a new segment",
				"file", reps[last].path, "new", segmentName(seq))
		}
		if f, key, err = createSegment(pc.Dir, seq); err != nil {
			return rec, err
		}
	}

	s.restoreClock(rp.hw)
	s.j = newJournal(pc.Dir, pc.Policy, pc.Interval, pc.CompactAt, pc.Log)
	s.j.lock = lock
	s.j.start(f, seq, key, size)
	s.mu.Lock()
	before := len(s.entries)
	s.reapDue(s.now()) // deadlines that passed while down: deleted, journaled
	rec.Expired = before - len(s.entries)
	rec.Keys = len(s.entries)
	s.mu.Unlock()
	rec.Clock = s.clock.Now()
	removeObsolete(pc.Dir, first, pc.Log)
	rec.Took = time.Since(t0)
	return rec, nil
}

// makeDir creates dir if missing, durably: its entry in the parent
// directory is synced, or a power loss could take the whole directory.
func makeDir(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	return syncDir(filepath.Dir(filepath.Clean(dir)))
}

// listData returns the numbered files of dir and removes leftover
// temporary files (a snapshot interrupted before its rename).
func listData(dir string) (dataFiles, error) {
	var files dataFiles
	des, err := os.ReadDir(dir)
	if err != nil {
		return files, fmt.Errorf("read data directory: %w", err)
	}
	for _, de := range des {
		name := de.Name()
		if strings.HasSuffix(name, ".tmp") {
			_ = os.Remove(filepath.Join(dir, name))
			continue
		}
		if seq, ok := parseNumbered(name, "snapshot-", ".snap"); ok {
			files.snapshots = append(files.snapshots, seq)
		} else if seq, ok := parseNumbered(name, "journal-", ".log"); ok {
			files.segments = append(files.segments, seq)
		}
	}
	slices.Sort(files.snapshots)
	slices.Sort(files.segments)
	return files, nil
}

func parseNumbered(name, prefix, suffix string) (uint64, bool) {
	num, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return 0, false
	}
	num, ok = strings.CutSuffix(num, suffix)
	if !ok || len(num) != 16 {
		return 0, false
	}
	seq, err := strconv.ParseUint(num, 10, 64)
	return seq, err == nil && seq > 0
}

// cutSegment truncates a segment that is not appended to (not the last,
// or of format 1) to the end of its valid data, so the damage cut off is
// not found again once later segments hold records.
func cutSegment(path string, end int64) error {
	f, err := openSegmentForAppend(path, end)
	if err != nil {
		return err
	}
	return f.Close()
}

// openSegmentForAppend opens a segment positioned at end, the end of its
// valid data: anything after it is cut off.
func openSegmentForAppend(path string, end int64) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open journal: %w", err)
	}
	fail := func(err error) (*os.File, error) {
		_ = f.Close()
		return nil, fmt.Errorf("open journal %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err != nil {
		return fail(err)
	}
	if fi.Size() > end {
		if err := f.Truncate(end); err != nil {
			return fail(err)
		}
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if _, err := f.Seek(end, io.SeekStart); err != nil {
		return fail(err)
	}
	return f, nil
}

// restoreClock makes the clock continue at least from hw.
func (s *Store) restoreClock(hw hlc.HLC) {
	if hw.IsZero() {
		return
	}
	s.clockFloor.Store(hw.Wall)
	// Within skew by construction: the clock reads at least hw.Wall now.
	_ = s.clock.Observe(hlc.HLC{Wall: hw.Wall, Counter: hw.Counter, Node: restoreNode})
}

// replayer applies records to a store being recovered and tracks the
// highest HLC seen.
type replayer struct {
	s       *Store
	hw      hlc.HLC
	records int
}

func (rp *replayer) see(h hlc.HLC) {
	if h.Wall > rp.hw.Wall || (h.Wall == rp.hw.Wall && h.Counter > rp.hw.Counter) {
		rp.hw = hlc.HLC{Wall: h.Wall, Counter: h.Counter, Node: h.Node}
	}
}

// apply applies a SET or DELETE.
func (rp *replayer) apply(r *record) {
	s := rp.s
	rp.records++
	rp.see(r.version)
	if r.kind == recDelete {
		if e := s.entries[r.key]; e != nil {
			s.bytes -= entrySize(e.key, e.value)
			delete(s.entries, r.key)
		}
		return
	}
	e := s.entries[r.key]
	if e == nil {
		e = &entry{key: r.key, index: -1}
		s.entries[r.key] = e
	} else {
		s.bytes -= entrySize(e.key, e.value)
	}
	s.bytes += entrySize(e.key, r.value)
	e.value, e.version = r.value, r.version
	e.fence, e.fenced = r.fence, r.fenced
	if r.fenced {
		rp.see(r.fence)
	}
	e.expires = time.Time{}
	if r.expires != 0 {
		e.expires = time.Unix(0, r.expires)
	}
}

// finish puts every deadline in the expiry heap and every key in the
// index.
func (rp *replayer) finish() {
	rp.s.index.Clear(false)
	for k := range rp.s.entries {
		rp.s.index.ReplaceOrInsert(k)
	}
	s := rp.s
	s.expiry = s.expiry[:0]
	for _, e := range s.entries {
		if !e.expires.IsZero() {
			e.index = len(s.expiry)
			s.expiry = append(s.expiry, e)
		}
	}
	heap.Init(&s.expiry)
}

// corrupt is the error of damaged data at a place in a file.
func corrupt(path string, off int64, format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d: %s", ErrDataCorrupt, path, off, fmt.Sprintf(format, args...))
}

// loadSnapshot applies a snapshot: CLOCK, SETs, END with their count. A
// snapshot is complete by construction (renamed only once synced), so any
// damage is corruption.
func (rp *replayer) loadSnapshot(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("open snapshot: %w", err)
	}
	defer f.Close()
	if err := checkMagic(f, path, snapshotMagic); err != nil {
		return err
	}
	fr := newFrameReader(f, magicLen, nil)
	var sets uint64
	for i := 0; ; i++ {
		p, off, err := fr.next()
		switch {
		case err == io.EOF:
			return corrupt(path, off, "snapshot ends without its END record")
		case err != nil:
			return corrupt(path, off, "%v", err)
		}
		r, err := decodeRecord(p)
		if err != nil {
			return corrupt(path, off, "%v", err)
		}
		switch {
		case i == 0 && r.kind != recClock:
			return corrupt(path, off, "snapshot does not start with its CLOCK record")
		case i == 0:
			rp.see(r.version)
		case r.kind == recSet:
			rp.apply(&r)
			sets++
		case r.kind == recEnd:
			if r.count != sets {
				return corrupt(path, off, "snapshot END counts %d entries, the snapshot holds %d", r.count, sets)
			}
			if _, off, err := fr.next(); err != io.EOF {
				return corrupt(path, off, "data after the END record")
			}
			return nil
		default:
			return corrupt(path, off, "unexpected record kind %d in a snapshot", r.kind)
		}
	}
}

func checkMagic(f *os.File, path, magic string) error {
	var m [magicLen]byte
	if _, err := io.ReadFull(f, m[:]); err != nil || string(m[:]) != magic {
		return corrupt(path, 0, "not an ssrun snapshot (no %q header)", magic)
	}
	return nil
}

// segmentReplay is what replaying a journal segment found.
type segmentReplay struct {
	path    string
	header  segmentHeader
	size    int64 // of the file
	end     int64 // where its valid data ends
	records int   // records applied
	cut     error // why the data after end is not valid; nil if there is none
}

// replaySegment applies journal segment seq at path and returns where its
// valid data ends. Damage that an interrupted write can explain is cut off
// there (checkCuts decides, knowing the later segments); any other damage
// is ErrDataCorrupt:
//
//   - A file shorter than its header: segments are renamed into place with
//     their header written and synced (createSegment), so no crash leaves
//     one.
//   - In a format 2 segment, a record whose header checks but that runs
//     past the end of the file, or a header cut short, is the write the
//     crash interrupted: nothing can follow it, and the bytes after its
//     header, which may be a client's value, are not looked at. A header or
//     payload that does not match its checksum (damage, or pages an OS
//     crash did not write back) is cut off only if no frame valid at its
//     place follows: after the damaged header, or after the end of the
//     record whose payload is damaged. A frame's header checksum covers
//     the segment's random nonce and the frame's offset, so no value, nor
//     any frame copied from elsewhere, passes for one.
//   - In a format 1 segment (no header checksum), any valid frame after
//     the damage makes it corruption, as before format 2.
func (rp *replayer) replaySegment(path string, seq uint64) (segmentReplay, error) {
	sr := segmentReplay{path: path}
	f, err := os.Open(path)
	if err != nil {
		return sr, fmt.Errorf("open journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return sr, fmt.Errorf("open journal: %w", err)
	}
	sr.size = fi.Size()
	var hb [segmentHeaderLen]byte
	n, err := io.ReadFull(f, hb[:])
	if err != nil && err != io.EOF && !errors.Is(err, io.ErrUnexpectedEOF) {
		return sr, fmt.Errorf("read journal %s: %w", path, err)
	}
	switch sr.header, err = parseSegmentHeader(hb[:n]); {
	case errors.Is(err, errShortSegment):
		return sr, corrupt(path, int64(n), "%v (%d bytes): a segment is put in place only once its header is on disk, so this is not an interrupted write; "+
			"refusing to start rather than lose the records it held (move the directory aside or restore a backup; "+
			"ssrun before journal format 2, whose segments begin with %q, created them in place: if such a broker died creating this segment, "+
			"no snapshot has its number and no later segment exists, and removing the file loses nothing)", err, n, segmentMagicV1)
	case err != nil:
		return sr, corrupt(path, 0, "%v", err)
	case sr.header.version == 2 && sr.header.seq != seq:
		return sr, corrupt(path, magicLen, "the segment's header says it is segment %d (a file renamed or copied?)", sr.header.seq)
	}
	if _, err := f.Seek(sr.header.size(), io.SeekStart); err != nil {
		return sr, fmt.Errorf("read journal %s: %w", path, err)
	}
	fr := newFrameReader(f, sr.header.size(), sr.header.key())
	for {
		p, off, err := fr.next()
		if err == io.EOF {
			sr.end = off
			return sr, nil
		}
		if errors.Is(err, errTorn) || errors.Is(err, errBadHeader) || errors.Is(err, errBadFrame) {
			next, rerr := validFrameAfter(f, &sr.header, fr, off, err)
			if rerr != nil {
				return sr, fmt.Errorf("read journal %s: %w", path, rerr)
			}
			if next >= 0 {
				return sr, corrupt(path, off, "%v, but valid records follow at offset %d: this is not an interrupted write; refusing to start rather than lose them (move the directory aside or restore a backup)", err, next)
			}
			sr.end, sr.cut = off, err
			return sr, nil
		}
		if err != nil {
			return sr, fmt.Errorf("read journal %s: %w", path, err)
		}
		r, err := decodeRecord(p)
		if err != nil {
			return sr, corrupt(path, off, "%v", err)
		}
		if r.kind != recSet && r.kind != recDelete {
			return sr, corrupt(path, off, "unexpected record kind %d in a journal", r.kind)
		}
		rp.apply(&r)
		sr.records++
	}
}

// validFrameAfter returns the offset of the first valid frame after the
// bad one at off (err says what was wrong with it) that a record could
// start at, or -1 (replaySegment says which places those are).
func validFrameAfter(f *os.File, h *segmentHeader, fr *frameReader, off int64, err error) (int64, error) {
	from := off + 1
	switch {
	case h.version == 1:
	case errors.Is(err, errTorn):
		return -1, nil
	case errors.Is(err, errBadFrame):
		from = fr.badEnd
	}
	rest, err := io.ReadAll(io.NewSectionReader(f, from, 1<<62))
	if err != nil {
		return 0, err
	}
	var i int
	if h.version == 1 {
		i = nextValidFrame(rest)
	} else {
		i = nextKeyedFrame(rest, from, fr.key)
	}
	if i < 0 {
		return -1, nil
	}
	return from + int64(i), nil
}

// checkCuts accepts the damage cut off the end of a segment as an
// interrupted write only if no later segment holds anything past its
// header: a write is interrupted only at the end of the journal. It logs
// what is cut off.
func checkCuts(reps []segmentReplay, log *slog.Logger, rec *Recovery) error {
	for i, r := range reps {
		if r.cut == nil {
			continue
		}
		for _, later := range reps[i+1:] {
			if later.size > later.header.size() {
				return corrupt(r.path, r.end, "%v, but later journal segments hold records: refusing to start rather than lose them (move the directory aside or restore a backup)", r.cut)
			}
		}
		rec.Torn = fmt.Sprintf("%s at offset %d (%d bytes)", r.path, r.end, r.size-r.end)
		log.Warn("state store journal: cut off an incomplete record at its end (a write interrupted by a crash)",
			"file", r.path, "offset", r.end, "bytes", r.size-r.end, "reason", r.cut)
	}
	return nil
}

// removeObsolete deletes the segments and snapshots older than first (a
// snapshot covers them). Failures only cost disk space: logged.
func removeObsolete(dir string, first uint64, log *slog.Logger) {
	files, err := listData(dir)
	if err != nil {
		log.Warn("state store: cannot list old files to remove", "dir", dir, "error", err)
		return
	}
	removed := false
	for _, seq := range files.segments {
		if seq < first {
			removed = removeLogged(filepath.Join(dir, segmentName(seq)), log) || removed
		}
	}
	for _, seq := range files.snapshots {
		if seq < first {
			removed = removeLogged(filepath.Join(dir, snapshotName(seq)), log) || removed
		}
	}
	if removed {
		if err := syncDir(dir); err != nil {
			log.Warn("state store: removing old files", "error", err)
		}
	}
}

func removeLogged(path string, log *slog.Logger) bool {
	if err := os.Remove(path); err != nil {
		log.Warn("state store: cannot remove an old file", "file", path, "error", err)
		return false
	}
	return true
}
