// Package lineage is the host's feedback-loop damper: it gives every event
// its place in a chain of rule writes (a provenance.Lineage), one hop further
// than the event whose handler made the write.
package lineage

import (
	"slices"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/provenance"
)

// Table damps feedback loops between rules. Every write a rule makes while
// handling an event is recorded under the version the store gave it, one hop
// further than the event that caused it. When the notification for that
// version comes back, the event inherits the hop count; past maxHops the event
// is dropped instead of delivered, which breaks the loop, and the rules on
// the path are logged. Writes from outside ssrun's rules start at hop 0.
//
// The store may send a change's notification before the writer has its
// reply (and so the version). Writes in flight are therefore registered per
// key before they are sent, and a notification with an unknown version on a
// key with writes in flight takes the deepest of their lineages.
//
// A key a rule wrote with a TTL ends with a DELETE the store makes itself,
// under a fresh version. That DELETE is the write's doing, so it continues
// the write's lineage (a rule re-creating an expired key with a short TTL
// would otherwise loop undamped, each expiry starting again at hop 0): the
// last TTL write of each key is remembered until the key changes, and a
// DELETE that comes once the TTL has run out takes its lineage. A DELETE
// before that (someone deleted the key early) or after another write starts
// afresh.
type Table struct {
	clock    clock.Clock // of the TTLs' expiry
	mu       sync.Mutex
	m        map[string]provenance.Lineage
	order    []string // FIFO of versions, to bound the map
	next     int
	size     int
	pending  map[string][]*provenance.Lineage // key -> writes in flight
	expiring map[string]expiringWrite         // key -> its last write with a TTL
}

// expiringWrite is a rule's write with a TTL, awaiting its expiry.
type expiringWrite struct {
	version string
	due     int64 // on clock.Mono's clock: the write was sent at least ttl before
	entry   provenance.Lineage
}

func New(size int, c clock.Clock) *Table {
	// The map and the ring of versions grow as writes come (up to size):
	// a host that writes little costs little (ssrun test starts one per
	// case).
	return &Table{clock: c, m: map[string]provenance.Lineage{}, size: size,
		pending: map[string][]*provenance.Lineage{}, expiring: map[string]expiringWrite{}}
}

// Begin registers a write (op) to key by ruleName while it handles an event
// of lineage from, before the write is sent; ttl is the write's expiry (0
// for none, or a delete). The returned function ends it, recording the
// version the store gave (empty for a delete or a failure).
func (l *Table) Begin(key, op string, from provenance.Lineage, ruleName string, ttl time.Duration) func(version string) {
	sent := clock.Mono(l.clock)
	e := &provenance.Lineage{Hop: from.Hop + 1, Origin: from.Origin, Steps: from.Extend(provenance.Step{Rule: ruleName, Key: key, Op: op})}
	l.mu.Lock()
	l.pending[key] = append(l.pending[key], e)
	l.mu.Unlock()
	return func(version string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		ps := l.pending[key]
		for i, p := range ps {
			if p == e {
				ps = append(ps[:i], ps[i+1:]...)
				break
			}
		}
		if len(ps) == 0 {
			delete(l.pending, key)
		} else {
			l.pending[key] = ps
		}
		if version == "" {
			return
		}
		// The write's own step gets its version in a copy: lookups may
		// have handed out e's steps while the write was in flight.
		done := provenance.Lineage{Hop: e.Hop, Origin: e.Origin, Steps: slices.Clone(e.Steps)}
		done.Steps[len(done.Steps)-1].Version = version
		if ttl > 0 {
			if _, ok := l.expiring[key]; !ok && len(l.expiring) >= l.size {
				for k := range l.expiring { // full: forget any one
					delete(l.expiring, k)
					break
				}
			}
			l.expiring[key] = expiringWrite{version: version, due: sent + int64(ttl), entry: done}
		} else {
			delete(l.expiring, key)
		}
		if len(l.order) < l.size {
			l.order = append(l.order, version)
		} else {
			delete(l.m, l.order[l.next])
			l.order[l.next] = version
			l.next = (l.next + 1) % l.size
		}
		l.m[version] = done
	}
}

// Lookup returns the lineage of a notified change (op) of key: that of its
// version, else the deepest write in flight on the key, else, for the
// DELETE of an expired TTL write, that write's; else hop 0.
func (l *Table) Lookup(key, version string, op abi.Op) provenance.Lineage {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[version]; ok {
		return e
	}
	var deepest provenance.Lineage
	for _, p := range l.pending[key] {
		if p.Hop > deepest.Hop {
			deepest = *p
		}
	}
	if len(l.pending[key]) > 0 {
		// The notification beat the write's reply: it carries the version
		// the write's step does not have yet.
		if last := len(deepest.Steps) - 1; op == abi.OpSet && last >= 0 && deepest.Steps[last].Op == string(abi.OpSet) {
			deepest.Steps = slices.Clone(deepest.Steps)
			deepest.Steps[last].Version = version
		}
		return deepest
	}
	x, ok := l.expiring[key]
	if !ok {
		return deepest
	}
	switch op {
	case abi.OpSet:
		if x.version != version { // overwritten: the TTL is gone
			delete(l.expiring, key)
		}
	case abi.OpDelete:
		delete(l.expiring, key)
		if clock.Mono(l.clock) >= x.due {
			return x.entry
		}
	}
	return deepest
}
