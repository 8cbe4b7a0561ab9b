package patternwatch

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/host/internal/watch"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
)

// Rule is a rule's pattern watches: its patterns (live, or staged
// by a version that is starting, as exact watches are), the keys they
// cover, registered with the watch registry under the rule's sink,
// and what the rule last saw of each key, so that a scan delivers only
// what differs from it.
//
// Lock order: the host's rule.mu, then Rule.mu (call and wrote ask Covers
// under rule.mu); a Rule never takes rule.mu while it holds its own,
// nor calls the registry, the hub or the store.
type Rule struct {
	hub      *Hub     // the host's: scans, and the store and logger (Hub.client, Hub.log)
	reg      Registry // the watch registry
	lin      Lineages // the damper: a written key's lineage
	path     string   // the rule's (its watcherName, and who wrote a key: Hub.Wrote)
	name     string
	mailbox  Mailbox
	progress *membership.Progress // the rule's in a group (nil: not shared)
	owner    Owner
	sink     *sink

	mu       sync.Mutex
	live     map[string]Watch
	staged   map[Version]map[string]Watch
	keys     map[string]struct{} // covered by a live pattern and registered
	seen     map[string]seenKey  // what the rule was last given of each key
	over     map[string]bool     // patterns whose keys passed max_watched_keys (logged once)
	released bool
}

// Watch is a pattern a rule watches, with the options it asked for.
type Watch struct {
	Pat  patterns.Pattern
	Opts abi.WatchOptions
}

// Registry is the watch registry (*watch.Registry), where a rule's sink
// watches the keys its patterns cover.
type Registry interface {
	WatchRead(ctx context.Context, w watch.Watcher, key string) (res protocol.GetResult, read bool, err error)
	WatchKnown(ctx context.Context, w watch.Watcher, key string, known protocol.GetResult) error
	Unwatch(ctx context.Context, w watch.Watcher, key string)
}

// Lineages is the feedback-loop damper (*lineage.Table): the lineage of
// a key's write by a rule of the host.
type Lineages interface {
	Lookup(key, version string, op abi.Op) provenance.Lineage
}

// Mailbox is a rule's mailbox (*mailbox.Box): the events a scan gives it
// are queued even when it is full.
type Mailbox interface {
	PushAlways(mailbox.Delivery)
}

// seenKey is what a rule was last given of a key, and n counts the
// notifications given: a scan's read delivers nothing if one came while
// it was read (it is newer).
type seenKey struct {
	version string
	present bool
	n       uint64
}

// Owner is what a Rule asks of its rule (the host's *rule, through an
// adapter in host/rule.go).
type Owner interface {
	// Settings returns the rule's settings as they are now.
	Settings() Settings
	// Enqueue offers an event of a key the rule watches through a
	// pattern to the rule, as its own watches do.
	Enqueue(mailbox.Delivery)
	// WatchesExactly reports whether the rule watches key with watch: the
	// key's events reach it through that watch.
	WatchesExactly(key string) bool
	// NoteError records msg as the rule's last error.
	NoteError(msg string)
}

// Settings are what a rule's pattern watches follow of its settings
// (RuleConfig), as they were at one moment.
type Settings struct {
	Rescan         time.Duration // every rescan of its patterns (<= 0: none)
	MaxWatchedKeys int
	// Readable reports whether the rule may get key through a pattern:
	// it may read and watch it, and it is not the host's.
	Readable func(key string) bool
}

// sink is a rule's watcher of its pattern keys in the registry. A
// key the rule also watches exactly reaches it through its own watch.
type sink struct{ rp *Rule }

// NewRule returns the pattern watches of the rule at path (name: its
// file name): hub scans them, reg registers their keys, lin gives a key
// a rule of the host wrote its lineage, mb is the rule's mailbox, p its
// progress in a group (nil: not shared) and owner the rule.
func NewRule(hub *Hub, reg Registry, lin Lineages, path, name string, mb Mailbox, p *membership.Progress, owner Owner) *Rule {
	rp := &Rule{hub: hub, reg: reg, lin: lin, path: path, name: name, mailbox: mb, progress: p, owner: owner, live: map[string]Watch{}, staged: map[Version]map[string]Watch{},
		keys: map[string]struct{}{}, seen: map[string]seenKey{}, over: map[string]bool{}}
	rp.sink = &sink{rp: rp}
	return rp
}

func (s *sink) WatcherName() string { return s.rp.path + "\x00patterns" }

func (s *sink) Enqueue(d mailbox.Delivery) {
	rp := s.rp
	exact := rp.owner.WatchesExactly(d.Ev.Key)
	rp.mu.Lock()
	if _, ok := rp.keys[d.Ev.Key]; !ok {
		rp.mu.Unlock()
		return
	}
	present := d.Ev.Op == abi.OpSet
	sk := rp.seen[d.Ev.Key]
	if sk.n > 0 && sk.present == present && sk.version == d.Ev.Version {
		rp.mu.Unlock()
		return // a scan's read gave the rule this very version
	}
	rp.seen[d.Ev.Key] = seenKey{version: d.Ev.Version, present: present, n: sk.n + 1}
	rp.mu.Unlock()
	if !exact {
		rp.owner.Enqueue(d)
	}
}

// Covers reports whether a live pattern of the rule covers key, with the
// options it gets (self if a pattern matching it asked for it).
func (rp *Rule) Covers(key string) (abi.WatchOptions, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if _, ok := rp.keys[key]; !ok {
		return abi.WatchOptions{}, false
	}
	return rp.optsLocked(key), true
}

// Gets reports whether the rule gets ev, an event queued for it through
// its patterns, with the options it gets: the key is covered, or ev is
// the deletion of a key a live pattern matches that a scan released
// after ev was queued (the scan found the key gone; the rule must still
// get the deletion, which is the last it hears of the key).
func (rp *Rule) Gets(ev abi.Event) (abi.WatchOptions, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if _, ok := rp.keys[ev.Key]; !ok && (ev.Op != abi.OpDelete || !rp.coveredLocked(ev.Key)) {
		return abi.WatchOptions{}, false
	}
	return rp.optsLocked(ev.Key), true
}

// optsLocked returns the options key gets: self if a live pattern
// matching it asked for it. rp.mu is held.
func (rp *Rule) optsLocked(key string) abi.WatchOptions {
	if rp.selfLocked(key) {
		return abi.WatchOptions{Self: true}
	}
	return abi.WatchOptions{}
}

// has reports whether the rule has key through a pattern.
func (rp *Rule) has(key string) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	_, ok := rp.keys[key]
	return ok
}

// Version is a version of the rule (the host's *instance), which stages
// its pattern watches while it starts.
type Version interface {
	// Replaced reports whether the version was replaced or stopped.
	Replaced() bool
}

// Stage records a pattern watch of the version v while it starts (Swap
// applies it).
func (rp *Rule) Stage(v Version, lp Watch) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	for other := range rp.staged { // versions that never went live
		if other.Replaced() {
			delete(rp.staged, other)
		}
	}
	if rp.staged[v] == nil {
		rp.staged[v] = map[string]Watch{}
	}
	rp.staged[v][lp.Pat.Src] = lp
}

// Unstage removes a staged pattern watch of v; false when there was none.
func (rp *Rule) Unstage(v Version, pattern string) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	_, ok := rp.staged[v][pattern]
	delete(rp.staged[v], pattern)
	return ok
}

// Add makes lp live, subscribes it and makes its first scan (registering
// the keys it finds and queueing their events before it returns, as a
// watch registers its key), or updates the options of a live one.
func (rp *Rule) Add(ctx context.Context, lp Watch) error {
	rp.mu.Lock()
	if rp.released {
		rp.mu.Unlock()
		return abi.Errorf(abi.StatusUnavailable, "watch_pattern %q: rule %s was stopped", lp.Pat.Src, rp.name)
	}
	_, had := rp.live[lp.Pat.Src]
	rp.live[lp.Pat.Src] = lp
	rp.mu.Unlock()
	if !had {
		rp.hub.subscribe(lp.Pat, rp, rp.owner.Settings().Rescan)
		rp.hub.scanOne(ctx, lp.Pat.Src, rp, true)
	}
	return nil
}

// Drop ends the live pattern watch of pattern, releasing the keys no other
// live pattern covers; false when it was not watched.
func (rp *Rule) Drop(ctx context.Context, pattern string) bool {
	rp.mu.Lock()
	lp, ok := rp.live[pattern]
	if !ok {
		rp.mu.Unlock()
		return false
	}
	delete(rp.live, pattern)
	delete(rp.over, pattern)
	var gone []string
	for k := range rp.keys {
		if lp.Pat.Match(k) && !rp.coveredLocked(k) {
			gone = append(gone, k)
			delete(rp.keys, k)
			delete(rp.seen, k)
		}
	}
	rp.mu.Unlock()
	rp.hub.unsubscribe(pattern, rp)
	rp.unregister(ctx, gone)
	return true
}

// coveredLocked reports whether a live pattern matches key. rp.mu is held.
func (rp *Rule) coveredLocked(key string) bool {
	for _, lp := range rp.live {
		if lp.Pat.Match(key) {
			return true
		}
	}
	return false
}

// unregister takes the rule's sink off keys in the registry.
func (rp *Rule) unregister(ctx context.Context, keys []string) {
	forEachBounded(keys, func(_ int, k string) { rp.reg.Unwatch(ctx, rp.sink, k) })
}

// Swap applies the patterns the version next staged as it started: the
// new ones are subscribed and scanned, those it does not watch dropped,
// and those both versions watch scanned again for the rule (keys created
// meanwhile; what the rule saw is not given again). It runs in the host's
// rule.swap, next.mu held; the events it queues wait for the swap to end.
func (rp *Rule) Swap(ctx context.Context, next Version) {
	rp.mu.Lock()
	want := rp.staged[next]
	delete(rp.staged, next)
	var drop, kept []string
	for src := range rp.live {
		if _, ok := want[src]; !ok {
			drop = append(drop, src)
		}
	}
	var add []Watch
	for src, lp := range want {
		if _, ok := rp.live[src]; ok {
			rp.live[src] = lp
			kept = append(kept, src)
		} else {
			add = append(add, lp)
		}
	}
	rp.mu.Unlock()
	slices.Sort(drop)
	slices.Sort(kept)
	slices.SortFunc(add, func(a, b Watch) int { return strings.Compare(a.Pat.Src, b.Pat.Src) })
	for _, src := range drop {
		rp.Drop(ctx, src)
	}
	for _, lp := range add {
		_ = rp.Add(ctx, lp) // fails only once the rule is released
	}
	for _, src := range kept {
		rp.hub.scanOne(ctx, src, rp, false)
	}
}

// Release ends every pattern watch of the rule. After it, none is added.
func (rp *Rule) Release(ctx context.Context) {
	rp.mu.Lock()
	rp.released = true
	pats := make([]string, 0, len(rp.live))
	for p := range rp.live {
		pats = append(pats, p)
	}
	keys := make([]string, 0, len(rp.keys))
	for k := range rp.keys {
		keys = append(keys, k)
	}
	clear(rp.live)
	clear(rp.staged)
	clear(rp.keys)
	clear(rp.seen)
	rp.mu.Unlock()
	for _, p := range pats {
		rp.hub.unsubscribe(p, rp)
	}
	rp.unregister(ctx, keys)
}

// Reconfigure applies new settings of the rule: its patterns rescan at
// its new rescan, and the keys it may no longer read or watch are let go.
func (rp *Rule) Reconfigure(ctx context.Context, cfg Settings) {
	rp.mu.Lock()
	pats := make([]patterns.Pattern, 0, len(rp.live))
	for _, lp := range rp.live {
		pats = append(pats, lp.Pat)
	}
	var gone []string
	for k := range rp.keys {
		if !cfg.Readable(k) {
			gone = append(gone, k)
			delete(rp.keys, k)
			delete(rp.seen, k)
		}
	}
	rp.mu.Unlock()
	for _, p := range pats {
		rp.hub.subscribe(p, rp, cfg.Rescan)
	}
	rp.unregister(ctx, gone)
}

// found takes the keys a scan of pattern found (all of them if complete;
// else the first max_watched_keys): the keys the rule may read and does
// not have yet are registered and given to it, up to its
// max_watched_keys; after a complete scan, the keys of the pattern that
// are gone are given as deleted (if the rule saw them present) and
// released. first says it is the pattern's first scan for the rule.
func (rp *Rule) found(ctx context.Context, pattern string, keys []string, complete, first bool) {
	cfg := rp.owner.Settings()
	rp.mu.Lock()
	lp, ok := rp.live[pattern]
	if !ok || rp.released {
		rp.mu.Unlock()
		return
	}
	var fresh []string
	for _, k := range keys {
		if _, ok := rp.keys[k]; !ok && cfg.Readable(k) {
			fresh = append(fresh, k)
		}
	}
	room := max(cfg.MaxWatchedKeys-len(rp.keys), 0)
	over := 0
	if len(fresh) > room {
		over = len(fresh) - room
		fresh = fresh[:room]
	}
	if first && complete {
		fresh = append(fresh, rp.goneSinceOwner(lp.Pat, keys, cfg)...)
	}
	overLogged := rp.over[pattern]
	rp.over[pattern] = over > 0 || !complete
	var gone []string
	if complete {
		in := make(map[string]struct{}, len(keys))
		for _, k := range keys {
			in[k] = struct{}{}
		}
		for k := range rp.keys {
			if _, ok := in[k]; !ok && lp.Pat.Match(k) {
				gone = append(gone, k)
			}
		}
		slices.Sort(gone)
	}
	rp.mu.Unlock()
	if over > 0 || !complete {
		rp.hub.overLimit.Add(uint64(over))
		if !overLogged {
			more := fmt.Sprintf("%d more keys", over)
			if !complete {
				more = "more keys than the scan holds"
			}
			msg := fmt.Sprintf("watch_pattern %q: %s match than max_watched_keys (%d) allows: not watched", pattern, more, cfg.MaxWatchedKeys)
			rp.hub.log.Error("pattern watch past its rule's max_watched_keys: keys not watched", "rule", rp.name, "pattern", pattern,
				"max_watched_keys", cfg.MaxWatchedKeys, "not_watched", over, "complete", complete)
			rp.owner.NoteError(msg)
		}
	}
	rp.register(ctx, fresh, "", !first, nil)
	rp.prune(ctx, gone)
}

// goneSinceOwner returns the keys of pat the group's previous owner of the
// rule handled present that a complete scan (keys) did not find: deleted
// while no host ran the rule, to be given as such. rp.mu is held.
func (rp *Rule) goneSinceOwner(pat patterns.Pattern, keys []string, cfg Settings) []string {
	p := rp.progress
	if p == nil {
		return nil
	}
	p.Mu.Lock()
	defer p.Mu.Unlock()
	if p.Fresh {
		return nil
	}
	var out []string
	for k, v := range p.Seen {
		if _, have := rp.keys[k]; v != "" && !have && pat.Match(k) && cfg.Readable(k) {
			if _, found := slices.BinarySearch(keys, k); !found {
				out = append(out, k)
			}
		}
	}
	slices.Sort(out)
	return out
}

// discovered adds key, which writer (a rule of the host) set to known (nil:
// unknown, read it), if a live pattern of the rule matches it and the rule does not have it yet;
// the writer itself gets it only if the pattern asked for self. The rule
// gets known once the key is registered (one round trip after the write:
// no read first), then whatever a read finds newer (a write from elsewhere
// that came before the registration).
func (rp *Rule) discovered(ctx context.Context, key, writer string, known *protocol.GetResult) {
	cfg := rp.owner.Settings()
	rp.mu.Lock()
	_, have := rp.keys[key]
	want := !have && !rp.released && rp.coveredLocked(key) && cfg.Readable(key)
	full := len(rp.keys) >= cfg.MaxWatchedKeys
	rp.mu.Unlock()
	if !want {
		return
	}
	if full {
		rp.hub.overLimit.Add(1)
		return
	}
	var k []protocol.GetResult
	if known != nil {
		k = []protocol.GetResult{*known}
	}
	rp.register(ctx, []string{key}, writer, true, k)
}

// register registers keys for the rule (up to registerAtOnce at once, each
// a KEYNOTIFY and a read, or a read for a key registered already), then
// gives the rule, in the order of keys, each one whose state differs from
// what it last saw (writer: see discovered; late: count them as found
// late). known, when not nil, holds each key's state as the writer stored
// it: it is given without a read before, and the read follows (verify).
func (rp *Rule) register(ctx context.Context, keys []string, writer string, late bool, known []protocol.GetResult) {
	if len(keys) == 0 {
		return
	}
	n0 := make([]uint64, len(keys))
	rp.mu.Lock()
	if rp.released {
		rp.mu.Unlock()
		return
	}
	for i, k := range keys {
		rp.keys[k] = struct{}{}
		n0[i] = rp.seen[k].n
	}
	rp.mu.Unlock()
	reads := make([]protocol.GetResult, len(keys))
	errs := make([]error, len(keys))
	forEachBounded(keys, func(i int, k string) {
		if known != nil {
			reads[i], errs[i] = known[i], rp.reg.WatchKnown(ctx, rp.sink, k, known[i])
			return
		}
		res, read, err := rp.reg.WatchRead(ctx, rp.sink, k)
		if err == nil && !read {
			res, err = rp.hub.client.Get(ctx, []byte(k), protocol.CallOptions{})
		}
		reads[i], errs[i] = res, err
	})
	// The rule stopped, or its pattern was unwatched, meanwhile: what
	// release or drop did not see registered yet is let go here.
	var stale []string
	rp.mu.Lock()
	for _, k := range keys {
		if rp.released || !rp.coveredLocked(k) {
			delete(rp.keys, k)
			stale = append(stale, k)
		}
	}
	rp.mu.Unlock()
	rp.unregister(context.WithoutCancel(ctx), stale)
	var failed []string
	for i, k := range keys {
		if errs[i] != nil {
			failed = append(failed, k)
			continue
		}
		if rp.give(k, reads[i], n0[i], writer) && late {
			rp.hub.late.Add(1)
		}
		if known != nil {
			rp.verify(ctx, k)
		}
	}
	if len(failed) > 0 {
		if ctx.Err() == nil {
			rp.hub.log.Warn("pattern watch: keys not registered; tried again at the next rescan or reconnection", "rule", rp.name,
				"keys", len(failed), "first", failed[0], "err", errs[slices.Index(keys, failed[0])])
		}
		rp.mu.Lock()
		for _, k := range failed {
			delete(rp.keys, k)
		}
		rp.mu.Unlock()
		rp.unregister(context.WithoutCancel(ctx), failed)
	}
}

// give delivers the state res read of key to the rule, as a resync event,
// unless it is what the rule last saw, a notification came since the
// read began (n0: it is newer), or the previous owner of a rule shared by
// a group handled that version. It reports whether it delivered (or, for
// the writer's own write, would have).
func (rp *Rule) give(key string, res protocol.GetResult, n0 uint64, writer string) bool {
	version := ""
	if res.Found {
		version = res.Version.String()
	}
	ev := abi.Event{Key: key, Op: abi.OpDelete, Resync: true}
	if res.Found {
		ev.Op, ev.Value, ev.Version = abi.OpSet, res.Value, version
	}
	rp.mu.Lock()
	defer rp.mu.Unlock()
	sk := rp.seen[key]
	if _, ok := rp.keys[key]; !ok || rp.released || sk.n != n0 {
		return false
	}
	if p := rp.progress; p != nil && sk.n == 0 {
		if v, ok := ownerSaw(p, key); ok { // what the group's previous owner handled
			sk = seenKey{version: v, present: v != "", n: 1}
		}
	}
	if sk.present == res.Found && sk.version == version && (sk.n > 0 || !res.Found) {
		if rp.seen[key].n == 0 && sk.n > 0 {
			rp.seen[key] = seenKey{version: version, present: res.Found, n: n0 + 1}
		}
		return false
	}
	rp.seen[key] = seenKey{version: version, present: res.Found, n: n0 + 1}
	lin := provenance.Lineage{Origin: &provenance.Origin{Key: key, Op: string(ev.Op), Version: version}}
	if writer != "" {
		lin = rp.lin.Lookup(key, version, ev.Op)
		if writer == rp.path && !rp.selfLocked(key) {
			return true // the rule's own write: not an event for it
		}
	}
	rp.mailbox.PushAlways(mailbox.Delivery{Ev: ev, Lin: lin})
	return true
}

// verify reads key, which the rule was given from what a writer of the
// host stored, and gives the rule what the read finds if it is newer: a
// write from elsewhere between the writer's and the key's registration,
// which no notification reports. A notification since the key was given
// is newer than the read, which is then dropped (see give).
func (rp *Rule) verify(ctx context.Context, key string) {
	rp.mu.Lock()
	n := rp.seen[key].n
	rp.mu.Unlock()
	res, err := rp.hub.client.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return // the next rescan or reconnection reads it
	}
	rp.give(key, res, n, "")
}

// selfLocked reports whether a live pattern matching key asked for self.
// rp.mu is held.
func (rp *Rule) selfLocked(key string) bool {
	for _, lp := range rp.live {
		if lp.Opts.Self && lp.Pat.Match(key) {
			return true
		}
	}
	return false
}

// prune releases keys a complete scan did not find: each is given as
// deleted if the rule saw it present and a read confirms it is gone (a
// key created after the scan passed it stays).
func (rp *Rule) prune(ctx context.Context, keys []string) {
	var gone []string
	for _, k := range keys {
		rp.mu.Lock()
		sk, ok := rp.seen[k]
		_, have := rp.keys[k]
		rp.mu.Unlock()
		if !have {
			continue
		}
		if ok && sk.present {
			res, err := rp.hub.client.Get(ctx, []byte(k), protocol.CallOptions{})
			if err != nil || res.Found {
				continue
			}
			rp.give(k, res, sk.n, "")
		}
		rp.mu.Lock()
		delete(rp.keys, k)
		delete(rp.seen, k)
		rp.mu.Unlock()
		gone = append(gone, k)
	}
	rp.unregister(ctx, gone)
}

// maxKeys is the rule's max_watched_keys (sub).
func (rp *Rule) maxKeys() int { return rp.owner.Settings().MaxWatchedKeys }

// order is where the rule comes among a pattern's rules (sub).
func (rp *Rule) order() string { return rp.path }

// ownerSaw returns the version of key the rule's previous owner in a
// group handled (p; "" for deleted); false when it handled none, and on
// the rule's first run.
func ownerSaw(p *membership.Progress, key string) (version string, ok bool) {
	p.Mu.Lock()
	defer p.Mu.Unlock()
	v, ok := p.Seen[key]
	return v, ok && !p.Fresh
}

// Status returns the rule's live patterns, sorted, and how many keys they
// cover.
func (rp *Rule) Status() ([]string, int) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return slices.Sorted(maps.Keys(rp.live)), len(rp.keys)
}

// registerAtOnce bounds the keys of a scan registered at once (as
// host/rule.go's swapWatchers bounds a swap's).
const registerAtOnce = 16

// forEachBounded calls f for each key, up to registerAtOnce at once, and
// returns when all calls have.
func forEachBounded(keys []string, f func(i int, k string)) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, registerAtOnce)
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i, k)
		})
	}
	wg.Wait()
}
