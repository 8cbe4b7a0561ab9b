package broker

import "os"

// SetFsync replaces the fsync of b's journal (b must have a data directory).
func SetFsync(b *Broker, fn func(*os.File) error) { b.store.SetSyncFile(fn) }
