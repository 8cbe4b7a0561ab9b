package store

import (
	"bytes"
	"container/heap"
	"errors"
	"fmt"
	"strings"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// This file lets a store in memory stand in front of another store as a
// copy of some of its keys: Seed copies a key as the other store holds it,
// Forget drops a copy. A dry run (package host) stages its rules' writes in
// such a store, seeded from the real one key by key.

// errJournaled refuses Seed and Forget on a store with a data directory:
// they change keys without a version or a journal record.
var errJournaled = errors.New("store: a store with a data directory cannot be seeded")

// Seed puts key with value and version as another store holds them: no
// expiry, no fence, no notification. The store's clock moves past version,
// so that the versions it issues next are greater; a version more than
// hlc.MaxSkew ahead of the store's clock is refused and nothing changes.
// Only a store in memory can be seeded.
func (s *Store) Seed(key, value []byte, version hlc.HLC) error {
	if len(key) == 0 {
		return errors.New("store: seed: empty key")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.j != nil {
		return errJournaled
	}
	if _, err := s.clock.Recv(version); err != nil {
		return fmt.Errorf("store: seed %q: %w", key, err)
	}
	s.forgetLocked(key)
	e := &entry{key: string(key), value: bytes.Clone(value), version: version, index: -1}
	if e.value == nil {
		e.value = []byte{}
	}
	e.version.Node = strings.Clone(version.Node) // it may alias a reply packet
	s.entries[e.key] = e
	s.index.ReplaceOrInsert(e.key)
	s.bytes += entrySize(e.key, e.value)
	return nil
}

// Forget removes key, if present, as if it had never been set: no version,
// no notification. Only a store in memory forgets (see Seed).
func (s *Store) Forget(key []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.j != nil {
		return errJournaled
	}
	s.forgetLocked(key)
	return nil
}

func (s *Store) forgetLocked(key []byte) {
	e := s.entries[string(key)]
	if e == nil {
		return
	}
	delete(s.entries, e.key)
	s.index.Delete(e.key)
	s.bytes -= entrySize(e.key, e.value)
	if e.index >= 0 {
		heap.Remove(&s.expiry, e.index)
	}
}
