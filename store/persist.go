package store

import (
	"errors"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// This file is the store's persistence (Config.DataDir, `ssrun broker
// --data DIR`): what is kept, the design and its guarantees, and the glue
// between the store and its journal. Recovery is in persist_recover.go,
// snapshots in persist_snapshot.go, the journal in journal.go and the byte
// format in journal_record.go.
//
// What is kept: every key with its value, version, absolute expiry deadline
// and fencing token, and the clock's high-water mark. KEYNOTIFY
// registrations are not (they die with their connection anyway, §13.1).
//
// Design: a write-ahead journal plus snapshots, not an embedded database.
// The store already holds everything in memory and serialises changes under
// one lock; what it needs from disk is an ordered, durable record of those
// changes. An append-only log gives exactly that with one write(2) per change
// and one fsync per group of changes, where a B-tree store such as bbolt
// costs a page-level copy-on-write and an fsync per transaction (and a
// goroutine per transaction to batch them). The format is small enough to
// check completely (journal_record.go; fuzzed).
//
//   - Every change (SET, DEL, VDEL, expiry) is appended to the journal with
//     the store lock held, before memory changes: the journal's order is the
//     store's order, and a change that could not be journaled is refused
//     (or, for an expiry, never announced).
//   - A record written with write(2) is in the kernel's page cache: it
//     survives the broker process dying at any instant (kill -9). Whether it
//     survives the machine dying is the fsync policy (FsyncPolicy).
//   - Replies and notifications are not held back on the request's
//     goroutine (mochi reads a client's packets on one goroutine; blocking
//     it on fsync would serialise the client's pipeline behind the disk).
//     Each carries the journal position it depends on and the connection's
//     writer goroutine (outbox.go) waits until the syncer has synced past
//     it. Under FsyncAlways every reply waits for the journal's end as of its
//     execution, reads included: nobody is ever shown a state that a crash
//     could take back.
//   - When the current segment reaches compactAt bytes, the store copies its
//     entries under the lock (a consistent cut), switches the journal to a
//     new segment at that instant, and writes a snapshot of the copy in the
//     background: to a temporary file, fsynced, renamed, directory fsynced.
//     Only then are the older segments and snapshots deleted.
//   - Recovery loads the newest snapshot and replays the segments from its
//     number on. What a crash can leave is cut off and logged; anything
//     else is damage, and the broker refuses to start (ErrDataCorrupt,
//     naming the file and offset) instead of losing or inventing data. The
//     rules, below, never read a byte a client chose to decide. Entries
//     whose deadline passed while the broker was down are deleted at once
//     (and the deletion journaled); the others get their deadlines back, so
//     they still expire and notify.
//
// Torn tails and short segments (journal format 2, journal_record.go):
//
//   - A segment comes into being whole: its header (magic, number, a
//     random nonce, a checksum) is written to a temporary file, synced,
//     renamed into place, and the directory synced, before any record goes
//     to it. A crash while creating one leaves only the temporary file,
//     removed at the next start. So a segment shorter than its header, or
//     whose header does not check or names another number, is damage, never
//     an interrupted write, whichever segment it is (the newest included):
//     refused. (Format 1 segments were created in place; a directory whose
//     old broker died while creating one is refused too, and the message
//     says when removing the file loses nothing.)
//   - Every record's frame header has a checksum of its own (length and
//     payload checksum), keyed by the segment's nonce and the frame's
//     offset. A record whose header checks but that runs past the end of
//     the file, or a header cut short, is the write the crash interrupted:
//     the file ends inside it, so nothing can follow it. It is cut off
//     without a look at its payload, which may be a client's value made of
//     copies of valid frames. Such a record was never acknowledged: a reply
//     waits for its write(2) to return, and under FsyncAlways for the
//     fsync after it (an OS crash under the other policies can lose
//     acknowledged records, as FsyncPolicy says).
//   - A header or a payload that does not match its checksum cannot come
//     from a process crash (the file holds a prefix of what was written);
//     an OS crash can leave it, in pages not yet written back at the end of
//     the journal. It is cut off only if no frame valid at its place
//     follows: after the damaged header, or after the end, which the
//     header gives, of the record whose payload is damaged. Only the
//     journal writes a frame valid at its place: bytes in a value would
//     need the nonce, which never leaves the broker (a guess passes with
//     probability 2^-32), and a frame copied from elsewhere sits at another
//     offset. If one follows, the data is damaged in the middle: refused.
//   - Damage cut off one segment while a later segment holds records is not
//     the end of the journal: refused.
//   - Format 1 segments (written before format 2: no header checksums, no
//     nonce) are still read, with format 1's rule: any valid frame after
//     the damage refuses. The broker never appends to one again: it starts
//     a new segment after it, and the next snapshot removes it.
//   - The clock restarts at least at the highest version, deletion tick and
//     fencing token in the data, and at the high-water mark a snapshot
//     records: versions keep increasing even if the wall clock stepped back
//     (clockFloor). Every version the store hands out (SET, and the tick of
//     a DELETE notification) is journaled, so this covers all of them, with
//     one exception: an OS crash under FsyncInterval or FsyncNever loses the
//     unsynced window, versions included; the clock then restarts from the
//     wall clock, which is past them unless it also stepped back.
//   - One broker per directory: a flock on DIR/LOCK (ErrDataLocked).
//   - A failed write or fsync stops the journal for good (a failed fsync
//     may have dropped the data it was to save): later changes are refused
//     with "-ERR the state store could not persist the change", nothing
//     unsynced is acknowledged, and Broker.Fatal reports it.
//
// aio-persistence (§2, §12.4): with a data directory every key is
// persisted, flagged or not, which the protocol allows (a local server MAY
// persist). Persisting only flagged keys would make the state after a
// restart a mix in which a fencing token or version from an unpersisted key
// could be issued again; that is not offered. Without a data directory the
// store says at start that it is in memory only, and the first SET that asks
// for aio-persistence is logged (once) as not surviving a restart.

// Errors of a data directory New refuses (wrapped with the directory).
var (
	// ErrDataLocked: another broker uses the directory.
	ErrDataLocked = errors.New("in use by another broker")
	// ErrDataCorrupt: the directory holds damaged or inconsistent data
	// that an interrupted write cannot explain; the error names the file
	// and offset.
	ErrDataCorrupt = errors.New("damaged data")
)

// errTextNotPersisted is the -ERR text of a change the journal refused.
const errTextNotPersisted = "the state store could not persist the change"

// DefaultSnapshotBytes is the journal size at which a snapshot replaces it,
// when Config.SnapshotBytes is zero. Recovery reads at most about this much
// journal besides the snapshot.
const DefaultSnapshotBytes = 64 << 20

// notDurable is the position of a change the journal failed to record:
// nothing that reports it is ever sent.
const notDurable = math.MaxUint64

// PersistConfig configures a store's data directory.
type PersistConfig struct {
	Dir       string
	Policy    FsyncPolicy
	Interval  time.Duration // FsyncInterval period
	CompactAt int64         // 0: DefaultSnapshotBytes
	Log       *slog.Logger
}

// journalSet records a SET before it is applied. It returns the position a
// reply or notification must wait for.
func (s *Store) journalSet(key string, value []byte, v hlc.HLC, expires time.Time, fence hlc.HLC, fenced bool) (uint64, error) {
	if s.j == nil {
		return 0, nil
	}
	r := record{kind: recSet, key: key, value: value, version: v, fence: fence, fenced: fenced}
	if !expires.IsZero() {
		r.expires = expires.UnixNano()
	}
	return s.j.append(&r)
}

// journalDelete records the deletion of key at tick v (DEL, VDEL, expiry).
// On failure the position is notDurable.
func (s *Store) journalDelete(key string, v hlc.HLC) (uint64, error) {
	if s.j == nil {
		return 0, nil
	}
	pos, err := s.j.append(&record{kind: recDelete, key: key, version: v})
	if err != nil {
		return notDurable, err
	}
	return pos, nil
}

// replyPos is the position a reply to a request just executed waits for:
// the journal's end, so that it reports no state a crash could undo.
func (s *Store) replyPos() uint64 {
	if s.j == nil {
		return 0
	}
	return s.j.position()
}

// WaitDurable blocks until pos is durable (nil), the journal failed (its
// error) or done is closed.
func (s *Store) WaitDurable(pos uint64, done <-chan struct{}) error {
	if pos == 0 || s.j == nil {
		return nil
	}
	return s.j.waitDurable(pos, done)
}

// Close syncs and closes the journal and releases the directory.
func (s *Store) Close() error {
	if s.j == nil {
		return nil
	}
	return s.j.close()
}

// Persisted reports whether the store keeps its keys in a data directory
// (OpenData).
func (s *Store) Persisted() bool { return s.j != nil }

// Fatal reports, at most once, the failure that stopped the data
// directory's journal (a failed write or fsync): from then on changes are
// refused and nothing unsynced is acknowledged. It is nil (never ready) for
// a store in memory.
func (s *Store) Fatal() <-chan error {
	if s.j == nil {
		return nil
	}
	return s.j.fatal
}

// SetSyncFile replaces how the journal forces a file to stable storage
// ((*os.File).Sync): tests hold or fail fsyncs with it. The store must have
// a data directory.
func (s *Store) SetSyncFile(fn func(*os.File) error) {
	s.j.mu.Lock()
	defer s.j.mu.Unlock()
	s.j.syncFile = fn
}
