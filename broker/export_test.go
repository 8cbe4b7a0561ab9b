package broker

import "os"

// SetFsync replaces the fsync of b's journal (b must have a data directory).
func SetFsync(b *Broker, fn func(*os.File) error) {
	j := b.store.j
	j.mu.Lock()
	defer j.mu.Unlock()
	j.syncFile = fn
}
