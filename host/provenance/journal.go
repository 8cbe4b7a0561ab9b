package provenance

import (
	"container/list"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// The provenance journal answers "why is this key this value": for each key
// a rule wrote, the last such write, with the event the rule was handling
// and the chain of rule writes back to the outside change that started it
// (taken from the feedback-loop damper's lineage, host/internal/lineage). It is kept
// in memory only, bounded by entries and by bytes; the least recently
// written key is forgotten first (LRU), so the keys rules write often stay.

// Journal defaults (Config.JournalEntries, Config.JournalBytes) and the
// part of a written value the journal keeps.
const (
	DefaultJournalEntries = 4096
	DefaultJournalBytes   = 4 << 20
	// JournalValueBytes is how much of a written value an entry keeps: the
	// first 256 bytes, cut there (Write.ValueSize has the full size, and
	// Write.Truncated says it was cut).
	JournalValueBytes = 256
	// journalEntryOverhead estimates what an entry costs besides its
	// strings (the Write, the list element and the map slot).
	journalEntryOverhead = 256
)

// Write is the journal's record of the last write a rule made to a key.
type Write struct {
	Key  string `json:"key"`
	Rule string `json:"rule"` // file name of the rule that wrote it
	Op   string `json:"op"`   // SET, DEL or VDEL
	// Value is the first JournalValueBytes bytes of a SET's value (empty
	// for a delete); ValueSize is its full size.
	Value     string    `json:"value"`
	ValueSize int       `json:"value_size"`
	Truncated bool      `json:"truncated,omitempty"`
	Version   string    `json:"version,omitempty"` // the version the store gave a SET
	At        time.Time `json:"at"`
	// Event is the event the rule was handling when it wrote; zero for a
	// write outside a handler (while the rule loaded, or from a plugin's
	// own goroutine).
	Event Cause `json:"event"`
	// Chain is the rule writes from the origin to this one, oldest first
	// (this write last; at most the last 8).
	Chain []Step `json:"chain"`
	// Origin is the change from outside the host's rules that started the
	// chain; nil when the chain began with a timer, a lost lock or a write
	// outside a handler.
	Origin *Origin `json:"origin,omitempty"`
}

// Cause is the event a rule handled: a key's change, a timer or a lost
// lock, and who caused it: a rule of this host (Rule) or, for a change
// from outside, the writer's client id when the store names it (Client).
type Cause struct {
	Key     string `json:"key"`
	Op      string `json:"op"` // SET, DELETE, TIMER or LOCK_LOST
	Version string `json:"version,omitempty"`
	Resync  bool   `json:"resync,omitempty"`
	Rule    string `json:"rule,omitempty"`
	Client  string `json:"client,omitempty"`
}

// Journal is the bounded LRU of the last write per key.
type Journal struct {
	mu         sync.Mutex
	maxEntries int
	maxBytes   int
	bytes      int
	lru        *list.List // of *journalEntry, the latest write first
	m          map[string]*list.Element
}

type journalEntry struct {
	w    Write
	size int
}

func NewJournal(maxEntries, maxBytes int) *Journal {
	if maxEntries <= 0 {
		maxEntries = DefaultJournalEntries
	}
	if maxBytes <= 0 {
		maxBytes = DefaultJournalBytes
	}
	return &Journal{maxEntries: maxEntries, maxBytes: maxBytes, lru: list.New(), m: map[string]*list.Element{}}
}

// Record keeps w, with a copy of the first JournalValueBytes of value, as
// the last write of its key and forgets the least recently written keys
// beyond the bounds. An entry larger than the byte bound on its own is
// kept alone.
func (j *Journal) Record(w Write, value []byte) {
	w.ValueSize = len(value)
	w.Truncated = len(value) > JournalValueBytes
	w.Value = string(value[:min(len(value), JournalValueBytes)]) // a copy
	e := &journalEntry{w: w, size: entrySize(w)}
	j.mu.Lock()
	defer j.mu.Unlock()
	if old, ok := j.m[w.Key]; ok {
		j.bytes -= old.Value.(*journalEntry).size
		j.lru.Remove(old)
	}
	j.m[w.Key] = j.lru.PushFront(e)
	j.bytes += e.size
	for j.lru.Len() > 1 && (j.lru.Len() > j.maxEntries || j.bytes > j.maxBytes) {
		last := j.lru.Back()
		old := last.Value.(*journalEntry)
		j.lru.Remove(last)
		delete(j.m, old.w.Key)
		j.bytes -= old.size
	}
}

// Get returns the last write of key, if the journal still has it.
func (j *Journal) Get(key string) (Write, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	el, ok := j.m[key]
	if !ok {
		return Write{}, false
	}
	return el.Value.(*journalEntry).w, true
}

// Size returns the entries held and their estimated bytes.
func (j *Journal) Size() (entries, bytes int) {
	j.mu.Lock()
	defer j.mu.Unlock()
	return j.lru.Len(), j.bytes
}

// entrySize estimates the memory an entry holds.
func entrySize(w Write) int {
	n := journalEntryOverhead + len(w.Key) + len(w.Rule) + len(w.Value) + len(w.Version) +
		len(w.Event.Key) + len(w.Event.Version) + len(w.Event.Rule) + len(w.Event.Client)
	for _, s := range w.Chain {
		n += 64 + len(s.Rule) + len(s.Key) + len(s.Version)
	}
	if o := w.Origin; o != nil {
		n += 64 + len(o.Key) + len(o.Version) + len(o.Client)
	}
	return n
}

// Wrote records a write of rule (op, with value for a SET) to key, which
// the store applied (version for a SET), made while the rule handled the
// event cause of lineage from (a zero cause: outside a handler, when the
// write has no chain before it), and logs it on l at debug level.
func (j *Journal) Wrote(l *slog.Logger, at time.Time, rule, key, op string, value []byte, version string, cause Cause, from Lineage) {
	if cause.Op == "" {
		from = Lineage{}
	}
	w := Write{Key: key, Rule: rule, Op: op, Version: version, At: at, Event: cause, Origin: from.Origin,
		Chain: from.Extend(Step{Rule: rule, Key: key, Op: op, Version: version})}
	j.Record(w, value)
	if l.Enabled(context.Background(), slog.LevelDebug) {
		attrs := []any{"rule", rule, "key", key, "op", op, "version", version,
			"event_key", cause.Key, "event_op", cause.Op, "event_version", cause.Version, "chain", Describe(w.Chain)}
		if o := from.Origin; o != nil {
			attrs = append(attrs, "origin_key", o.Key, "origin_client", o.Client)
		}
		l.Debug("rule wrote", attrs...)
	}
}

// CauseOf describes for the journal the event ev, of lineage from.
func CauseOf(ev abi.Event, from Lineage) Cause {
	c := Cause{Key: ev.Key, Op: string(ev.Op), Version: ev.Version, Resync: ev.Resync}
	if n := len(from.Steps); n > 0 {
		c.Rule = from.Steps[n-1].Rule
	} else if o := from.Origin; o != nil {
		c.Client = o.Client
	}
	return c
}
