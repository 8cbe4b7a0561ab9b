package group

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/protocol"
)

// Pattern hints across a group: a key that a rule of one member writes
// reaches the pattern watches of the rules other members run at once, as
// it does on its own host (patternwatch.Hub.Wrote), not at their next
// rescan.
// The rescans stay what makes a pattern watch miss nothing; the hints
// save the wait. Two keys per member, under the group's:
//
//	$ssrun/group/NAME/patterns/ID  the patterns the rules of member ID
//	                               watch, one a line: written by the
//	                               member when they change, read by the
//	                               others at each step of their loop
//	$ssrun/group/NAME/found/ID     the doorbell of member ID, which it
//	                               watches: a member whose rule wrote a
//	                               key matching one of ID's patterns sets
//	                               it to that key, once per key
//
// A member's patterns are at most a step (ttl/3) old where the others
// read them: a key written meanwhile is found at the next rescan.

// maxRung bounds the (member, key) pairs a member remembers having rung
// for; past it the memory is cleared, and a key may be rung for again.
const maxRung = 1 << 16

// maxPublished bounds the patterns a member publishes, in bytes: past it,
// it publishes none, and the others' writes reach its rules at their
// rescans only. The others read no more of a member's value either (a
// hostile write of megabytes of "a*\n" would be hundreds of thousands of
// patterns, each matched against every key a rule writes: Doorbells), so
// a member's patterns are at most maxMemberPatterns, each a line of at
// least a byte.
const maxPublished = 64 << 10

// maxMemberPatterns bounds the patterns read from one member's value.
const maxMemberPatterns = (maxPublished + 1) / 2

// Hints are a member's side of the pattern hints: what it published of its
// own patterns, the other members' patterns, and the keys it has rung for.
type Hints struct {
	o    *Ownership // the group's keys
	id   string     // this member
	hub  Hub
	bell *doorbell // this member's doorbell, which it watches
	log  *slog.Logger
	now  func() time.Time // of the TTLs of the keys rung for

	mu        sync.Mutex
	published string                     // this member's patterns as last written ("" at first)
	others    map[string]*patternSet     // by member id: its patterns as last read or notified
	watching  map[string]*memberPatterns // by member id: the watch of its patterns
	rung      map[string]time.Time       // id + "\x00" + key: rung, until then (zero: for good)
}

func newHints(o *Ownership, id string, hub Hub, log *slog.Logger, now func() time.Time) *Hints {
	gh := &Hints{o: o, id: id, hub: hub, log: log, now: now, others: map[string]*patternSet{}, watching: map[string]*memberPatterns{}, rung: map[string]time.Time{}}
	gh.bell = &doorbell{hub: hub, key: gh.DoorbellKey(id), prefix: o.prefix}
	return gh
}

func (gh *Hints) patternsKey(id string) string { return gh.o.key("patterns/" + id) }

// DoorbellKey returns the key of member id's doorbell.
func (gh *Hints) DoorbellKey(id string) string { return gh.o.key("found/" + id) }

// sync publishes this member's patterns if they changed, and watches the
// patterns of the live members (each member's are read when it is first
// seen, then come with their notifications: a step at rest costs no
// request); a member that left is let go.
func (gh *Hints) sync(ctx context.Context, reg Watches, store Store, live []string) error {
	mine := strings.Join(gh.hub.PatternList(), "\n")
	if len(mine) > maxPublished {
		mine = ""
	}
	gh.mu.Lock()
	changed := mine != gh.published
	gh.mu.Unlock()
	var errs []error
	if changed {
		if _, err := store.Set(ctx, []byte(gh.patternsKey(gh.id)), []byte(mine), protocol.SetOptions{}); err != nil {
			errs = append(errs, err)
		} else {
			gh.mu.Lock()
			gh.published = mine
			gh.mu.Unlock()
		}
	}
	for _, id := range live {
		gh.mu.Lock()
		_, watched := gh.watching[id]
		gh.mu.Unlock()
		if id == gh.id || watched {
			continue
		}
		w := &memberPatterns{gh: gh, id: id}
		key := gh.patternsKey(id)
		gh.mu.Lock()
		gh.watching[id] = w // its notifications count from now
		gh.mu.Unlock()
		res, read, err := reg.WatchRead(ctx, w, key)
		if err == nil && !read {
			res, err = store.Get(ctx, []byte(key), protocol.CallOptions{})
		}
		var ps *patternSet
		if err == nil {
			ps = w.parse(res.Value)
		}
		gh.mu.Lock()
		if err != nil {
			delete(gh.watching, id)
			delete(gh.others, id)
		} else if _, notified := gh.others[id]; !notified { // a notification since the read began is newer
			gh.others[id] = ps
		}
		gh.mu.Unlock()
		if err != nil {
			reg.Unwatch(ctx, w, key)
			errs = append(errs, err)
		}
	}
	gh.mu.Lock()
	var gone []*memberPatterns
	for id, w := range gh.watching {
		if !slices.Contains(live, id) {
			gone = append(gone, w)
			delete(gh.watching, id)
			delete(gh.others, id)
		}
	}
	gh.mu.Unlock()
	for _, w := range gone {
		reg.Unwatch(ctx, w, gh.patternsKey(w.id))
	}
	return errors.Join(errs...)
}

// memberPatterns is the watcher of another member's published patterns.
type memberPatterns struct {
	gh     *Hints
	id     string
	warned bool // about a value longer than a member publishes (under gh.mu)
}

// parse is parsePatternLines, indexed, warning once per watch of a value
// longer than a member publishes.
func (w *memberPatterns) parse(v []byte) *patternSet {
	ps, cut := parsePatternLines(v)
	if cut == 0 {
		return newPatternSet(ps)
	}
	w.gh.mu.Lock()
	warned := w.warned
	w.warned = true
	w.gh.mu.Unlock()
	if !warned {
		w.gh.log.Warn("group: a member's published patterns are longer than a member publishes: the rest left out (its rules' rescans still find the keys)",
			"group", w.gh.o.name, "member", w.id, "bytes", len(v), "max", maxPublished, "left_out_bytes", cut, "patterns", len(ps))
	}
	return newPatternSet(ps)
}

// Enqueue implements watch.Watcher: the member's patterns as they are now.
func (w *memberPatterns) Enqueue(d mailbox.Delivery) {
	ps := newPatternSet(nil) // deleted: none
	if d.Ev.Op == abi.OpSet {
		ps = w.parse(d.Ev.Value)
	}
	w.gh.mu.Lock()
	defer w.gh.mu.Unlock()
	if w.gh.watching[w.id] == w { // not a watch let go
		w.gh.others[w.id] = ps
	}
}

// WatcherName implements watch.Watcher.
func (w *memberPatterns) WatcherName() string { return "\x00patterns " + w.id }

// PatternsOf returns the patterns of member id as this member last read
// or was notified of them.
func (gh *Hints) PatternsOf(id string) []patterns.Pattern {
	gh.mu.Lock()
	defer gh.mu.Unlock()
	if s := gh.others[id]; s != nil {
		return slices.Clone(s.list)
	}
	return nil
}

// parsePatternLines compiles a member's published patterns, one a line,
// leaving out any that does not compile (another version of ssrun, or a
// hostile write: it only costs a rescan's wait). Of a value longer than
// maxPublished only the lines within its first maxPublished bytes are read
// (at most maxMemberPatterns); cut is how many bytes were left out.
func parsePatternLines(v []byte) (out []patterns.Pattern, cut int) {
	if len(v) > maxPublished {
		keep := max(bytes.LastIndexByte(v[:maxPublished+1], '\n'), 0)
		v, cut = v[:keep], len(v)-keep
	}
	for line := range strings.SplitSeq(string(v), "\n") {
		if p, err := patterns.Compile(line); err == nil {
			out = append(out, p)
		}
	}
	return out, cut
}

// Doorbells returns the doorbell keys of the other members with a pattern
// matching key, written with ttl (0: none), that were not rung for key
// yet, and notes them as rung (patternwatch.Hints). A key written with a
// TTL is rung for again once the TTL has passed: it may have expired, and
// the other member let it go.
func (gh *Hints) Doorbells(key string, ttl time.Duration) []string {
	now := gh.now()
	gh.mu.Lock()
	defer gh.mu.Unlock()
	var out []string
	for id, ps := range gh.others { // on every write of a rule: match first, the rung key only then
		if !ps.match(key) {
			continue
		}
		rk := id + "\x00" + key
		if until, ok := gh.rung[rk]; ok && (until.IsZero() || now.Before(until)) {
			continue
		}
		if len(gh.rung) >= maxRung {
			clear(gh.rung)
		}
		var until time.Time // forever
		if ttl > 0 {
			until = now.Add(ttl)
		}
		gh.rung[rk] = until
		out = append(out, gh.DoorbellKey(id))
	}
	slices.Sort(out)
	return out
}

// Unring forgets that key was rung for, to every member
// (patternwatch.Hints).
func (gh *Hints) Unring(key string) {
	gh.mu.Lock()
	defer gh.mu.Unlock()
	for id := range gh.others {
		delete(gh.rung, id+"\x00"+key)
	}
}

// leave lets go of the other members' patterns and deletes this member's
// published ones (its doorbell is let go with its watch).
func (gh *Hints) leave(ctx context.Context, reg Watches, store Store) {
	gh.mu.Lock()
	published := gh.published
	watching := gh.watching
	gh.watching, gh.others = map[string]*memberPatterns{}, map[string]*patternSet{}
	gh.mu.Unlock()
	for id, w := range watching {
		reg.Unwatch(ctx, w, gh.patternsKey(id))
	}
	if published == "" {
		return
	}
	_, _ = store.Del(ctx, []byte(gh.patternsKey(gh.id)), protocol.DelOptions{}) // it expires with nothing: the others read only live members'
}

// doorbell is the watcher of a member's doorbell key: each key another
// member rings with goes to the pattern hub, as a key a rule of this host
// wrote would (its state read, since this host does not know it); a key
// under the reserved prefix is no rule's.
type doorbell struct {
	hub    Hub
	key    string
	prefix string // the host's reserved prefix
}

// Enqueue implements watch.Watcher.
func (d *doorbell) Enqueue(dl mailbox.Delivery) {
	if dl.Ev.Op != abi.OpSet || len(dl.Ev.Value) == 0 || strings.HasPrefix(string(dl.Ev.Value), d.prefix) {
		return
	}
	d.hub.Rang(string(dl.Ev.Value))
}

// WatcherName implements watch.Watcher.
func (d *doorbell) WatcherName() string { return "\x00doorbell " + d.key }
