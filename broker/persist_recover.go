package broker

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

// recovery summarises what openData found, for the start-up log.
type recovery struct {
	snapshot string        // file loaded, "" if none
	segments int           // journal segments replayed
	records  int           // records applied (snapshot and journal)
	keys     int           // live keys after recovery
	expired  int           // keys whose deadline passed while the broker was down
	torn     string        // "file at offset N (M bytes)" when an interrupted write was cut off
	clock    hlc.HLC       // the clock after recovery
	took     time.Duration // how long recovery took
}

// dataFiles are the numbered files of a data directory, ascending.
type dataFiles struct {
	snapshots []uint64
	segments  []uint64
}

// restoreNode is the node id under which the recovered high-water mark is
// folded into the clock (the clock ignores values from its own node).
const restoreNode = "recovered"

// openData locks the directory, rebuilds the store from it and starts the
// journal. The store must be new and not yet shared.
func (s *store) openData(pc persistConfig) (rec recovery, err error) {
	t0 := time.Now()
	if pc.compactAt <= 0 {
		pc.compactAt = DefaultSnapshotBytes
	}
	if err := makeDir(pc.dir); err != nil {
		return rec, err
	}
	lock, err := lockDir(pc.dir)
	if err != nil {
		return rec, err
	}
	defer func() {
		if err != nil {
			_ = unlockDir(lock)
		}
	}()
	files, err := listData(pc.dir)
	if err != nil {
		return rec, err
	}
	rp := &replayer{s: s}
	var first uint64 = 1 // the first segment to replay
	if n := len(files.snapshots); n > 0 {
		first = files.snapshots[n-1]
		rec.snapshot = snapshotName(first)
		if err := rp.loadSnapshot(filepath.Join(pc.dir, rec.snapshot)); err != nil {
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
				ErrDataCorrupt, pc.dir, segmentName(first+uint64(i)))
		}
	}
	if len(segs) == 0 && rec.snapshot != "" {
		return rec, fmt.Errorf("%w: %s: journal segment %s is missing (it is created before snapshot %s)",
			ErrDataCorrupt, pc.dir, segmentName(first), rec.snapshot)
	}

	// Replay; find where each segment's valid data ends.
	ends := make([]int64, len(segs))
	for i, seq := range segs {
		laterEmpty, err := onlyEmptySegments(pc.dir, segs[i+1:])
		if err != nil {
			return rec, err
		}
		ends[i], err = rp.replaySegment(filepath.Join(pc.dir, segmentName(seq)), laterEmpty, pc, &rec)
		if err != nil {
			return rec, err
		}
	}
	rec.segments = len(segs)
	rec.records = rp.records
	rp.finish()
	for i, seq := range segs[:max(len(segs)-1, 0)] {
		if err := cutSegment(filepath.Join(pc.dir, segmentName(seq)), ends[i]); err != nil {
			return rec, err
		}
	}

	// Open the last segment for appending, cut to its valid end (or make
	// the first one of a fresh directory).
	var f *os.File
	var seq uint64
	var size int64
	if len(segs) == 0 {
		if f, err = createSegment(pc.dir, first); err != nil {
			return rec, err
		}
		seq, size = first, int64(len(segmentMagic))
	} else {
		seq, size = segs[len(segs)-1], ends[len(segs)-1]
		if f, err = openSegmentForAppend(filepath.Join(pc.dir, segmentName(seq)), size); err != nil {
			return rec, err
		}
		if size < int64(len(segmentMagic)) {
			size = int64(len(segmentMagic))
		}
	}

	s.restoreClock(rp.hw)
	s.j = newJournal(pc.dir, pc.policy, pc.interval, pc.compactAt, pc.log)
	s.j.lock = lock
	s.j.start(f, seq, size)
	s.mu.Lock()
	before := len(s.entries)
	s.reapDue(s.now()) // deadlines that passed while down: deleted, journaled
	rec.expired = before - len(s.entries)
	rec.keys = len(s.entries)
	s.mu.Unlock()
	rec.clock = s.clock.Now()
	removeObsolete(pc.dir, first, pc.log)
	rec.took = time.Since(t0)
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

// onlyEmptySegments reports whether every segment in seqs holds no record
// (nothing, or not more than its magic): damage before them can only be an
// interrupted write.
func onlyEmptySegments(dir string, seqs []uint64) (bool, error) {
	for _, seq := range seqs {
		fi, err := os.Stat(filepath.Join(dir, segmentName(seq)))
		if err != nil {
			return false, fmt.Errorf("read journal: %w", err)
		}
		if fi.Size() > int64(len(segmentMagic)) {
			return false, nil
		}
	}
	return true, nil
}

// cutSegment truncates a segment that is not the last to the end of its
// valid data (an interrupted write followed only by empty segments), so the
// damage is not found again once later segments hold records.
func cutSegment(path string, end int64) error {
	f, err := openSegmentForAppend(path, end)
	if err != nil {
		return err
	}
	return f.Close()
}

// openSegmentForAppend opens a segment positioned at end, the end of its
// valid data: anything after it is cut off, a missing magic written.
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
	if end < int64(len(segmentMagic)) { // created, but its magic never made it: write it again
		if err := f.Truncate(0); err != nil {
			return fail(err)
		}
		if _, err := f.WriteAt([]byte(segmentMagic), 0); err != nil {
			return fail(err)
		}
		end = int64(len(segmentMagic))
	} else if fi.Size() > end {
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
func (s *store) restoreClock(hw hlc.HLC) {
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
	s       *store
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

// finish puts every deadline in the expiry heap.
func (rp *replayer) finish() {
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
	fr := newFrameReader(f, magicLen)
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
		return corrupt(path, 0, "not an ssrun %s (no %q header)", kindOf(magic), magic)
	}
	return nil
}

func kindOf(magic string) string {
	if magic == snapshotMagic {
		return "snapshot"
	}
	return "journal segment"
}

// replaySegment applies a journal segment and returns the offset where its
// valid data ends. Damage with nothing valid after it, in this segment or
// the later ones (laterEmpty), is an interrupted write: the returned end
// cuts it off. Any other damage is ErrDataCorrupt.
func (rp *replayer) replaySegment(path string, laterEmpty bool, pc persistConfig, rec *recovery) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("open journal: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("open journal: %w", err)
	}
	if fi.Size() < int64(len(segmentMagic)) && laterEmpty {
		// Created but its magic not yet written when the broker died.
		return 0, nil
	}
	if err := checkMagic(f, path, segmentMagic); err != nil {
		return 0, err
	}
	fr := newFrameReader(f, magicLen)
	for {
		p, off, err := fr.next()
		if err == io.EOF {
			return off, nil
		}
		if errors.Is(err, errTorn) || errors.Is(err, errBadFrame) {
			next, rerr := nextValidAfter(f, off)
			if rerr != nil {
				return 0, fmt.Errorf("read journal %s: %w", path, rerr)
			}
			if next >= 0 {
				return 0, corrupt(path, off, "%v, but valid records follow at offset %d: this is not an interrupted write; refusing to start rather than lose them (move the directory aside or restore a backup)", err, next)
			}
			if !laterEmpty {
				return 0, corrupt(path, off, "%v, but later journal segments hold records: refusing to start rather than lose them (move the directory aside or restore a backup)", err)
			}
			rec.torn = fmt.Sprintf("%s at offset %d (%d bytes)", path, off, fi.Size()-off)
			pc.log.Warn("state store journal: cut off an incomplete record at its end (a write interrupted by a crash)",
				"file", path, "offset", off, "bytes", fi.Size()-off)
			return off, nil
		}
		if err != nil {
			return 0, fmt.Errorf("read journal %s: %w", path, err)
		}
		r, err := decodeRecord(p)
		if err != nil {
			return 0, corrupt(path, off, "%v", err)
		}
		if r.kind != recSet && r.kind != recDelete {
			return 0, corrupt(path, off, "unexpected record kind %d in a journal", r.kind)
		}
		rp.apply(&r)
	}
}

// nextValidAfter returns the offset of the first valid frame after off in
// f, or -1.
func nextValidAfter(f *os.File, off int64) (int64, error) {
	rest, err := io.ReadAll(io.NewSectionReader(f, off+1, 1<<62))
	if err != nil {
		return 0, err
	}
	if i := nextValidFrame(rest); i >= 0 {
		return off + 1 + int64(i), nil
	}
	return -1, nil
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
