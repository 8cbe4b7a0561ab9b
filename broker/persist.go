package broker

import (
	"fmt"
	"strings"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/ssrun/ssrun/protocol/wire"
	"github.com/ssrun/ssrun/store"
)

// The store's persistence settings and errors, as the broker's Config and
// New use them (store/persist.go and store/journal.go document them).
type FsyncPolicy = store.FsyncPolicy

const (
	FsyncAlways          = store.FsyncAlways
	FsyncInterval        = store.FsyncInterval
	FsyncNever           = store.FsyncNever
	DefaultFsyncInterval = store.DefaultFsyncInterval
	DefaultSnapshotBytes = store.DefaultSnapshotBytes
)

var (
	ParseFsyncPolicy = store.ParseFsyncPolicy
	ErrDataLocked    = store.ErrDataLocked
	ErrDataCorrupt   = store.ErrDataCorrupt
)

// This file is the broker's side of the store's persistence (store/persist.go):
// opening the data directory, logging where the keys live, the journal's
// fatal error, and the note about aio-persistence without one.

// openData opens Config.DataDir and recovers the store from it.
func (b *Broker) openData() error {
	rec, err := b.store.OpenData(store.PersistConfig{Dir: b.cfg.DataDir, Policy: b.cfg.Fsync, Interval: b.cfg.FsyncInterval,
		CompactAt: b.cfg.SnapshotBytes, Log: b.log})
	if err != nil {
		return fmt.Errorf("broker: data directory %s: %w", b.cfg.DataDir, err)
	}
	b.log.Info("state store recovered", "dir", b.cfg.DataDir, "keys", rec.Keys, "expired_while_down", rec.Expired,
		"snapshot", rec.Snapshot, "journal_segments", rec.Segments, "records", rec.Records,
		"clock", rec.Clock.String(), "took", rec.Took.Round(time.Millisecond))
	return nil
}

// logPersistence says at start where the keys live.
func (b *Broker) logPersistence() {
	if !b.store.Persisted() {
		b.log.Info("state store in memory only: keys are lost when the broker stops (keep them with a data directory: --data DIR, Config.DataDir)")
		return
	}
	attrs := []any{"dir", b.cfg.DataDir, "fsync", b.cfg.Fsync.String()}
	if b.cfg.Fsync == store.FsyncInterval {
		attrs = append(attrs, "fsync_interval", b.cfg.FsyncInterval)
	}
	b.log.Info("state store persisted", attrs...)
}

// Fatal reports, at most once, the failure that stopped the data directory's
// journal (a failed write or fsync): from then on changes are refused and
// nothing unsynced is acknowledged, so the process should stop and restart
// on a healthy disk. It is nil (never ready) for a store in memory.
func (b *Broker) Fatal() <-chan error {
	return b.store.Fatal()
}

// notePersistRequest logs, once per broker, that a SET asked for
// aio-persistence from a store that keeps nothing across restarts.
func (h *storeHook) notePersistRequest(cl *mqtt.Client, pk *packets.Packet) {
	if h.store.Persisted() {
		return
	}
	if v, ok := userProp(pk.Properties.User, wire.PropPersistence); !ok || !strings.EqualFold(v, "true") {
		return
	}
	h.memoryNote.Do(func() {
		h.log.Warn("a SET asked for aio-persistence, but the state store keeps keys in memory only: they will not survive a restart (persist them with a data directory: ssrun broker --data DIR)",
			"client", cl.ID)
	})
}
