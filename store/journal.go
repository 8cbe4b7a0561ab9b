package store

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/internal/filelock"
)

// This file is the store's write-ahead journal (persist.go has the design):
// the current segment file, appends, and the syncer goroutine that forces
// them to stable storage under the fsync policy, one fsync for every record
// appended before it (group commit).
//
// Positions: every append returns the journal's end after the record, in
// bytes appended since the journal was opened (an in-process counter, never
// stored). A reply or notification that depends on a change carries that
// position; waitDurable blocks until the syncer has synced past it.

// FsyncPolicy says when the journal is forced to stable storage (fsync).
// Every policy writes each change to the journal (write(2)) before the
// reply, so all of them survive a crash of the broker process (SIGKILL,
// panic, OOM kill); they differ on an operating system crash or power loss.
type FsyncPolicy uint8

const (
	// FsyncAlways (the default) sends no reply or notification before the
	// change it reports is on stable storage. Changes made while an fsync
	// runs share the next one (group commit). Nothing acknowledged is lost.
	FsyncAlways FsyncPolicy = iota
	// FsyncInterval syncs the journal every Config.FsyncInterval and
	// replies without waiting: a power loss or OS crash loses at most the
	// changes acknowledged in the last interval.
	FsyncInterval
	// FsyncNever leaves write-back to the operating system (Linux: about
	// 30 s): a power loss or OS crash loses what it had not written back.
	// The journal is still synced on a clean shutdown and before a
	// snapshot replaces it.
	FsyncNever
)

// DefaultFsyncInterval is the FsyncInterval period used when
// Config.FsyncInterval is zero.
const DefaultFsyncInterval = time.Second

func (p FsyncPolicy) String() string {
	switch p {
	case FsyncAlways:
		return "always"
	case FsyncInterval:
		return "interval"
	case FsyncNever:
		return "never"
	}
	return fmt.Sprintf("FsyncPolicy(%d)", uint8(p))
}

// ParseFsyncPolicy parses "always", "interval" or "never".
func ParseFsyncPolicy(s string) (FsyncPolicy, error) {
	for _, p := range []FsyncPolicy{FsyncAlways, FsyncInterval, FsyncNever} {
		if strings.EqualFold(s, p.String()) {
			return p, nil
		}
	}
	return 0, fmt.Errorf("fsync policy %q: want always, interval or never", s)
}

// errNotPersisted wraps every failure to journal a change; the change is
// then not applied (or, for an expiry, not acknowledged to anyone).
var errNotPersisted = errors.New("the change could not be persisted")

// ErrJournalClosed is returned to waiters once the journal is closed.
var ErrJournalClosed = errors.New("journal closed")

// Segment and snapshot file names: the number orders them.
func segmentName(seq uint64) string  { return fmt.Sprintf("journal-%016d.log", seq) }
func snapshotName(seq uint64) string { return fmt.Sprintf("snapshot-%016d.snap", seq) }

type journal struct {
	dir       string
	policy    FsyncPolicy
	interval  time.Duration
	log       *slog.Logger
	compactAt int64          // segment size that asks for a snapshot
	lock      *filelock.Lock // the directory lock, held until close
	syncFile  func(*os.File) error

	kick    chan struct{} // cap 1: records or a retired segment to sync
	compact chan struct{} // cap 1: the segment passed compactAt
	stop    chan struct{}
	wg      sync.WaitGroup // the syncer
	fatal   chan error     // cap 1: the failure that stopped the journal

	mu       sync.Mutex
	f        *os.File  // current segment, opened for appending
	seq      uint64    // its number
	key      *frameKey // its frames' key
	size     int64     // its size
	retired  []*os.File
	end      uint64 // bytes appended since open
	synced   uint64 // end as of the last completed sync
	err      error  // sticky failure
	syncedCh chan struct{}
	buf      []byte
	closed   bool
}

func newJournal(dir string, policy FsyncPolicy, interval time.Duration, compactAt int64, log *slog.Logger) *journal {
	return &journal{
		dir: dir, policy: policy, interval: interval, compactAt: compactAt, log: log, syncFile: (*os.File).Sync,
		kick: make(chan struct{}, 1), compact: make(chan struct{}, 1), stop: make(chan struct{}),
		fatal: make(chan error, 1), syncedCh: make(chan struct{}),
	}
}

// createSegment makes segment seq, empty but for its header, durably, and
// returns it open for appending with its frames' key. It is written and synced as
// a temporary file, renamed into place, and the directory synced: a
// segment's name never holds less than its whole header, so recovery can
// take a shorter file for what it is, damage (persist.go).
func createSegment(dir string, seq uint64) (*os.File, *frameKey, error) {
	path := filepath.Join(dir, segmentName(seq))
	tmp := path + ".tmp"
	nonce := new([8]byte)
	if _, err := rand.Read(nonce[:]); err != nil {
		return nil, nil, fmt.Errorf("create journal segment %s: %w", path, err)
	}
	switch _, err := os.Lstat(path); {
	case err == nil:
		return nil, nil, fmt.Errorf("create journal segment %s: %w", path, fs.ErrExist)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("create journal segment: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("create journal segment: %w", err)
	}
	if _, err := f.Write(appendSegmentHeader(nil, seq, nonce)); err != nil {
		return nil, nil, closeRemove(f, fmt.Errorf("write %s: %w", tmp, err))
	}
	if err := f.Sync(); err != nil {
		return nil, nil, closeRemove(f, fmt.Errorf("sync %s: %w", tmp, err))
	}
	if err := f.Close(); err != nil {
		_ = os.Remove(tmp)
		return nil, nil, fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return nil, nil, fmt.Errorf("create journal segment: %w", err)
	}
	if err := syncDir(dir); err != nil {
		_ = os.Remove(path) // nothing was written to it: a retry makes it again
		return nil, nil, err
	}
	if f, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0); err != nil {
		_ = os.Remove(path)
		return nil, nil, fmt.Errorf("open journal: %w", err)
	}
	return f, newFrameKey(nonce), nil
}

func closeRemove(f *os.File, err error) error {
	_ = f.Close()
	_ = os.Remove(f.Name())
	return err
}

// syncDir makes the directory's entries (created, renamed, removed files)
// durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// start makes f (segment seq of key, size bytes long) the current segment
// and runs the syncer.
func (j *journal) start(f *os.File, seq uint64, key *frameKey, size int64) {
	j.f, j.seq, j.key, j.size = f, seq, key, size
	j.wg.Add(1)
	go j.syncLoop()
	if size >= j.compactAt {
		j.signal(j.compact)
	}
}

func (j *journal) signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// append writes r to the current segment and returns the position a
// message reporting it must wait for: the journal's end after it under
// FsyncAlways, 0 otherwise. The store calls it with its lock held, before
// changing memory: the order of records is the order of changes.
func (j *journal) append(r *record) (uint64, error) {
	j.mu.Lock()
	if j.err != nil || j.closed {
		err := j.err
		j.mu.Unlock()
		if err == nil {
			err = ErrJournalClosed
		}
		return 0, fmt.Errorf("%w: %w", errNotPersisted, err)
	}
	j.buf = appendKeyedFrame(j.buf[:0], r, j.key, j.size)
	n, err := j.f.Write(j.buf)
	if cap(j.buf) > 1<<20 {
		j.buf = nil
	}
	if err != nil {
		// A partial record may be in the file: nothing may follow it.
		j.failLocked(fmt.Errorf("append to %s: %w", j.f.Name(), err))
		j.mu.Unlock()
		return 0, fmt.Errorf("%w: %w", errNotPersisted, err)
	}
	j.size += int64(n)
	j.end += uint64(n)
	pos, full := j.end, j.size >= j.compactAt
	j.mu.Unlock()
	if j.policy == FsyncAlways {
		j.signal(j.kick)
	} else {
		pos = 0 // nothing waits for the disk
	}
	if full {
		j.signal(j.compact)
	}
	return pos, nil
}

// position is what a reply must wait for under the policy: the end of the
// journal for FsyncAlways, 0 (nothing) otherwise.
func (j *journal) position() uint64 {
	if j.policy != FsyncAlways {
		return 0
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.end
}

// waitDurable blocks until the journal is synced past pos, the journal
// fails (its error), or done is closed (errJournalClosed).
func (j *journal) waitDurable(pos uint64, done <-chan struct{}) error {
	for {
		j.mu.Lock()
		synced, err, ch := j.synced, j.err, j.syncedCh
		j.mu.Unlock()
		switch {
		case synced >= pos:
			return nil
		case err != nil:
			return err
		}
		select {
		case <-ch:
		case <-done:
			return ErrJournalClosed
		}
	}
}

// failLocked records the journal's first failure: appends stop, waiters are
// released with the error, and the broker learns it through fatal. A failed
// write or fsync leaves the file in an unknown state (after a failed fsync
// Linux may have dropped the dirty pages), so the journal never retries.
func (j *journal) failLocked(err error) {
	if j.err != nil {
		return
	}
	j.err = err
	j.log.Error("state store journal failed: changes are no longer persisted or acknowledged; restart the broker", "dir", j.dir, "error", err)
	close(j.syncedCh)
	j.syncedCh = make(chan struct{})
	j.fatal <- fmt.Errorf("state store journal in %s: %w", j.dir, err)
}

// rotate makes f (segment seq of key, just created) current; the old
// segment is synced and closed by the syncer. The store calls it with its
// lock held, so no record is appended meanwhile.
func (j *journal) rotate(f *os.File, seq uint64, key *frameKey) {
	j.mu.Lock()
	j.retired = append(j.retired, j.f)
	j.f, j.seq, j.key, j.size = f, seq, key, segmentHeaderLen
	j.mu.Unlock()
	j.signal(j.kick)
}

// segment returns the current segment number.
func (j *journal) segment() uint64 {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.seq
}

// syncLoop is the syncer: it syncs when records arrive (FsyncAlways), on a
// ticker (FsyncInterval), or only retired segments (FsyncNever), and once
// more, whatever the policy, when the journal closes.
func (j *journal) syncLoop() {
	defer j.wg.Done()
	var tick <-chan time.Time
	if j.policy == FsyncInterval {
		t := time.NewTicker(j.interval)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-j.stop:
			j.syncRound(true)
			return
		case <-j.kick:
			j.syncRound(j.policy != FsyncNever)
		case <-tick:
			j.syncRound(true)
		}
	}
}

// syncRound syncs (when sync is set) the retired segments and the current
// one, closes the retired ones, and moves synced to the end as it was
// before the fsync: every record appended before it is covered.
func (j *journal) syncRound(sync bool) {
	j.mu.Lock()
	if j.err != nil {
		j.mu.Unlock()
		return
	}
	target, f, retired, syncFile := j.end, j.f, j.retired, j.syncFile
	j.retired = nil
	pending := target > j.synced || len(retired) > 0
	j.mu.Unlock()
	var err error
	for _, r := range retired {
		if sync && err == nil {
			err = syncFile(r)
		}
		if cerr := r.Close(); err == nil {
			err = cerr
		}
	}
	if sync && pending && err == nil {
		err = syncFile(f)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	switch {
	case err != nil:
		j.failLocked(fmt.Errorf("sync: %w", err))
	case sync && pending:
		j.synced = target
		close(j.syncedCh)
		j.syncedCh = make(chan struct{})
	}
}

// close stops the syncer after a last sync, closes the segment and releases
// the directory lock.
func (j *journal) close() error {
	j.mu.Lock()
	if j.closed {
		j.mu.Unlock()
		return nil
	}
	j.closed = true
	j.mu.Unlock()
	close(j.stop)
	j.wg.Wait()
	j.mu.Lock()
	err := j.err
	if j.f != nil {
		if cerr := j.f.Close(); err == nil {
			err = cerr
		}
	}
	j.mu.Unlock()
	if cerr := j.lock.Release(); err == nil {
		err = cerr
	}
	return err
}
