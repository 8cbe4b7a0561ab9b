package host

import (
	"strings"
	"sync"
)

// lineage damps feedback loops between rules. Every write a rule makes while
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
type lineage struct {
	mu      sync.Mutex
	m       map[string]lineageEntry
	order   []string // FIFO of versions, to bound the map
	next    int
	size    int
	pending map[string][]*lineageEntry // key -> writes in flight
}

type lineageEntry struct {
	hop   int
	chain []string // rule names along the path, oldest first
}

func newLineage(size int) *lineage {
	return &lineage{m: make(map[string]lineageEntry, size), order: make([]string, size), size: size, pending: map[string][]*lineageEntry{}}
}

// begin registers a write to key by ruleName while it handles an event at hop
// (with its chain), before the write is sent. The returned function ends it,
// recording the version the store gave (empty for a delete or a failure).
func (l *lineage) begin(key string, hop int, chain []string, ruleName string) func(version string) {
	c := make([]string, 0, min(len(chain)+1, maxChain))
	if len(chain) >= maxChain {
		chain = chain[len(chain)-maxChain+1:]
	}
	e := &lineageEntry{hop: hop + 1, chain: append(append(c, chain...), ruleName)}
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
		if old := l.order[l.next]; old != "" {
			delete(l.m, old)
		}
		l.order[l.next] = version
		l.next = (l.next + 1) % l.size
		l.m[version] = *e
	}
}

const maxChain = 8

// lookup returns the lineage of a notified change of key: that of its
// version, else the deepest write in flight on the key, else hop 0.
func (l *lineage) lookup(key, version string) lineageEntry {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.m[version]; ok {
		return e
	}
	var deepest lineageEntry
	for _, p := range l.pending[key] {
		if p.hop > deepest.hop {
			deepest = *p
		}
	}
	return deepest
}

// describe renders a chain for a log line, e.g. "a.lua -> b.lua -> a.lua".
func describe(chain []string) string { return strings.Join(chain, " -> ") }
