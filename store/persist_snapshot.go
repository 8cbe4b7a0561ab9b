package store

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// This file replaces the journal written so far by a snapshot (design in
// persist.go), so that the directory and the recovery time stay
// proportional to the data, not to its history.

// compactRetry is how long the compaction loop waits after a failed
// snapshot before it tries again (the journal keeps working meanwhile).
const compactRetry = time.Minute

// CompactLoop writes a snapshot whenever the journal's segment passes its
// size limit, until ctx ends.
func (s *Store) CompactLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.j.compact:
		}
		if err := s.compact(); err != nil {
			s.j.log.Error("state store snapshot failed; the journal grows until one succeeds", "dir", s.j.dir, "error", err)
			t := time.NewTimer(compactRetry)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}
}

// compact starts a new journal segment and writes the snapshot of the state
// at that instant, then deletes what the snapshot replaces.
func (s *Store) compact() error {
	j := s.j
	seq := j.segment() + 1 // only this goroutine rotates
	f, key, err := createSegment(j.dir, seq)
	if err != nil {
		return err
	}
	s.mu.Lock()
	j.rotate(f, seq, key)
	clock := s.clock.Now()
	entries := make([]record, 0, len(s.entries))
	for _, e := range s.entries { // values are never changed in place: sharing them is safe
		r := record{kind: recSet, key: e.key, value: e.value, version: e.version, fence: e.fence, fenced: e.fenced}
		if !e.expires.IsZero() {
			r.expires = e.expires.UnixNano()
		}
		entries = append(entries, r)
	}
	s.mu.Unlock()
	t0 := time.Now()
	if err := writeSnapshot(j.dir, seq, clock, entries); err != nil {
		return err
	}
	removeObsolete(j.dir, seq, j.log)
	j.log.Info("state store snapshot written", "file", snapshotName(seq), "keys", len(entries), "took", time.Since(t0).Round(time.Millisecond))
	return nil
}

// writeSnapshot writes snapshot seq durably: a temporary file, synced,
// renamed into place, the directory synced.
func writeSnapshot(dir string, seq uint64, clock hlc.HLC, entries []record) (err error) {
	path := filepath.Join(dir, snapshotName(seq))
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	w := bufio.NewWriterSize(f, 1<<20)
	var buf []byte
	write := func(r *record) error {
		buf = appendFrame(buf[:0], r)
		_, err := w.Write(buf)
		return err
	}
	if _, err := w.WriteString(snapshotMagic); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := write(&record{kind: recClock, version: clock}); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	for i := range entries {
		if err := write(&entries[i]); err != nil {
			return fmt.Errorf("write %s: %w", tmp, err)
		}
	}
	if err := write(&record{kind: recEnd, count: uint64(len(entries))}); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write snapshot: %w", err)
	}
	return syncDir(dir)
}
