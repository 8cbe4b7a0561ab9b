package patternwatch

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Hub is the host's side of pattern watches (watch_pattern): the
// patterns its rules watch, each scanned once for all the rules watching
// it, rescanned on the host's clock (every rescan of its rules, the
// shortest of them), at once for every rule after a reconnection, and
// at once for a key a rule of the host wrote. What a rule does with the
// keys a scan found is its Rule's (rule.go).
//
// Its loop runs the jobs (scans, written keys) one at a time, in the
// order they were queued; in a serial host a queued job and a due rescan
// count as activity until the loop has done them (host/internal/serial),
// so ssrun test's steps see their results.
type Hub struct {
	client   Store
	log      *slog.Logger
	clock    clock.Clock
	reserved string        // the host's own keys start with it: never listed
	work     serial.Signal // jobs were queued
	wake     *serial.Wake  // the next rescan is due

	mu    sync.Mutex
	subs  map[string]*subs // by pattern
	sched patterns.Schedule
	jobs  []job

	scans, pages, late, overLimit, scanErrors atomic.Uint64

	hints atomic.Pointer[Hints] // the other members' patterns, in a group (host/internal/group/hints.go)
}

// Store is what pattern watches ask of the state store (the host's
// Store): reads of the keys they register, and a member's doorbells in a
// group. To list keys it must also be a Scanner.
type Store interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
}

// Scanner is a Store that lists keys (SCAN): *protocol.Client.
type Scanner interface {
	Scan(pattern []byte, opts protocol.ScanOptions) *protocol.Pager
}

// Hints are the other members' patterns in a group (the host's
// group.Hints, host/internal/group/hints.go).
type Hints interface {
	// Doorbells returns the doorbell keys of the other members with a
	// pattern matching key that were not rung for key yet, and notes them
	// as rung.
	Doorbells(key string, ttl time.Duration) []string
	// Unring forgets that key was rung for: a rule of the host deleted
	// it, and another member's rule, whose next complete scan lets the
	// key go, must hear of it again when it is created again.
	Unring(key string)
}

// subs are the rules watching one pattern, with each one's rescan
// interval (RescanOff: none).
type subs struct {
	pat   patterns.Pattern
	rules map[sub]time.Duration
}

// sub is a rule watching patterns (its Rule).
type sub interface {
	// found takes the keys a scan of pattern found: all of them if
	// complete, else the first ones, up to the largest maxKeys of the
	// pattern's rules; first says it is the pattern's first scan for it.
	found(ctx context.Context, pattern string, keys []string, complete, first bool)
	// has reports whether the rule has key through a pattern.
	has(key string) bool
	// discovered adds key, set to known by the rule at path writer.
	discovered(ctx context.Context, key, writer string, known *protocol.GetResult)
	maxKeys() int
	order() string // the rule's place among a pattern's rules
}

// job is a scan of pattern for every rule that rescans it, or for
// all its rules (all: after a reconnection); or, with key set, a key the
// rule writer wrote.
type job struct {
	pattern string
	all     bool
	key     string
	writer  string              // the path of the rule that wrote key
	known   *protocol.GetResult // what it wrote: value and version (nil: read it)
	ring    []string            // doorbells to ring with key, in a group (host/internal/group/hints.go)
}

// NewHub returns the hub of a host's pattern watches, reading and listing
// keys with client, never those under reserved (the host's own). Run runs
// its loop.
func NewHub(client Store, log *slog.Logger, c clock.Clock, q *serial.Quiet, reserved string) *Hub {
	return &Hub{client: client, log: log, clock: c, reserved: reserved, work: serial.NewSignal(q), wake: serial.NewWake(c, q), subs: map[string]*subs{}}
}

// Run is the hub's loop, until ctx ends.
func (h *Hub) Run(ctx context.Context) {
	defer h.wake.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.work.C:
			h.runJobs(ctx)
			h.work.Took()
		case <-h.wake.C():
			h.rescanDue(ctx)
			h.wake.Took()
		}
	}
}

// queue adds a job and wakes the loop.
func (h *Hub) queue(j job) {
	h.mu.Lock()
	h.jobs = append(h.jobs, j)
	h.mu.Unlock()
	h.work.Raise()
}

func (h *Hub) runJobs(ctx context.Context) {
	for ctx.Err() == nil {
		h.mu.Lock()
		if len(h.jobs) == 0 {
			h.mu.Unlock()
			return
		}
		j := h.jobs[0]
		h.jobs = h.jobs[1:]
		h.mu.Unlock()
		if len(j.ring) > 0 {
			h.ringAll(ctx, j.key, j.ring)
			continue
		}
		if j.key != "" {
			h.discover(ctx, j.key, j.writer, j.known)
			continue
		}
		h.scanFor(ctx, j.pattern, h.subscribers(j.pattern, j.all), false)
	}
}

// rescanDue rescans the patterns whose time has come, for the rules that
// rescan them.
func (h *Hub) rescanDue(ctx context.Context) {
	h.mu.Lock()
	due := h.sched.Due(h.clock.Now())
	h.mu.Unlock()
	for _, p := range due {
		h.scanFor(ctx, p, h.subscribers(p, false), false)
	}
	h.rearm()
}

// subscribers returns the rules a scan of pattern is for: all of them,
// or (all false) those that rescan.
func (h *Hub) subscribers(pattern string, all bool) []sub {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.subs[pattern]
	if s == nil {
		return nil
	}
	var out []sub
	for rp, every := range s.rules {
		if all || every > 0 {
			out = append(out, rp)
		}
	}
	slices.SortFunc(out, func(a, b sub) int { return strings.Compare(a.order(), b.order()) })
	return out
}

// scanFor scans pattern once and hands the keys to rules; first says it
// is the pattern's first scan for them (keys found later count as late).
func (h *Hub) scanFor(ctx context.Context, pattern string, rules []sub, first bool) {
	if len(rules) == 0 {
		return
	}
	bound := 0
	for _, rp := range rules {
		bound = max(bound, rp.maxKeys())
	}
	keys, complete, err := h.Scan(ctx, pattern, bound, nil)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, protocol.ErrNotConnected) {
			h.scanErrors.Add(1)
			h.log.Warn("pattern scan failed; tried again at the next rescan or reconnection", "pattern", pattern, "err", err)
		}
		return
	}
	for _, rp := range rules {
		rp.found(ctx, pattern, keys, complete, first)
	}
}

// Scan lists the keys matching pattern that keep accepts (nil: all),
// sorted, never those under the reserved prefix, paging through the store; it
// stops once it has more than bound (complete false, bound keys
// returned), so it holds at most bound keys and a page whatever the store
// holds.
func (h *Hub) Scan(ctx context.Context, pattern string, bound int, keep func(string) bool) (keys []string, complete bool, err error) {
	sc, ok := h.client.(Scanner)
	if !ok {
		return nil, false, abi.Errorf(abi.StatusStoreError, "pattern %q: this store client cannot list keys (SCAN)", pattern)
	}
	h.scans.Add(1)
	p := sc.Scan([]byte(pattern), protocol.ScanOptions{})
	for p.Next(ctx) {
		h.pages.Add(1)
		for _, k := range p.Keys() {
			key := string(k)
			if strings.HasPrefix(key, h.reserved) || (keep != nil && !keep(key)) {
				continue
			}
			if len(keys) == bound {
				slices.Sort(keys)
				return keys, false, nil
			}
			keys = append(keys, key)
		}
	}
	if err := p.Err(); err != nil {
		return nil, false, err
	}
	slices.Sort(keys) // the store's order is bytewise; AIO's is not promised
	return keys, true, nil
}

// subscribe makes rp a watcher of pat, rescanning every every (RescanOff:
// never); the caller scans it for rp first (scanOne).
func (h *Hub) subscribe(pat patterns.Pattern, rp sub, every time.Duration) {
	h.mu.Lock()
	s := h.subs[pat.Src]
	if s == nil {
		s = &subs{pat: pat, rules: map[sub]time.Duration{}}
		h.subs[pat.Src] = s
	}
	s.rules[rp] = every
	h.scheduleLocked(pat.Src)
	h.mu.Unlock()
	h.rearm()
}

// scanOne scans pattern for rp alone, now, in the caller's goroutine:
// first says it is the pattern's first scan for rp.
func (h *Hub) scanOne(ctx context.Context, pattern string, rp sub, first bool) {
	h.scanFor(ctx, pattern, []sub{rp}, first)
}

// unsubscribe ends rp's watch of pattern.
func (h *Hub) unsubscribe(pattern string, rp sub) {
	h.mu.Lock()
	if s := h.subs[pattern]; s != nil {
		delete(s.rules, rp)
		if len(s.rules) == 0 {
			delete(h.subs, pattern)
		}
	}
	h.scheduleLocked(pattern)
	h.mu.Unlock()
	h.rearm()
}

// scheduleLocked sets pattern's rescan to the shortest interval of its
// rules. h.mu is held.
func (h *Hub) scheduleLocked(pattern string) {
	every := time.Duration(0)
	if s := h.subs[pattern]; s != nil {
		for _, d := range s.rules {
			if d > 0 && (every == 0 || d < every) {
				every = d
			}
		}
	}
	h.sched.Set(pattern, every, h.clock.Now())
}

// rearm sets the wake-up for the next rescan due.
func (h *Hub) rearm() {
	h.mu.Lock()
	next, ok := h.sched.Next()
	h.mu.Unlock()
	if !ok {
		h.wake.Stop()
		return
	}
	h.wake.Reset(next.Sub(h.clock.Now()))
}

// Reconnected queues a scan of every pattern for all its rules: keys
// created while the host was offline.
func (h *Hub) Reconnected() {
	for _, p := range h.PatternList() {
		h.queue(job{pattern: p, all: true})
	}
}

// Wrote is told of every key a rule of the host (writer) set, to value
// with version and ttl (0: none): if a rule watches a pattern it matches
// and does not have it yet, the key is added at once, without waiting for
// a rescan.
func (h *Hub) Wrote(writer, key string, value []byte, version string, ttl time.Duration) {
	if gh := h.hints.Load(); gh != nil {
		if bells := (*gh).Doorbells(key, ttl); len(bells) > 0 {
			h.queue(job{key: key, ring: bells})
		}
	}
	if !h.missing(key) {
		return
	}
	j := job{key: key, writer: writer}
	if v, err := hlc.Parse(version); err == nil { // else a read gives the state
		j.known = &protocol.GetResult{Found: true, Value: bytes.Clone(value), Version: v}
	}
	h.queue(j)
}

// Deleted is told of every key a rule of the host deleted.
func (h *Hub) Deleted(key string) {
	if gh := h.hints.Load(); gh != nil {
		(*gh).Unring(key)
	}
}

// missing reports whether a rule watches a pattern key matches and does
// not have key yet.
func (h *Hub) missing(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.subs {
		if !s.pat.Match(key) {
			continue
		}
		for rp := range s.rules {
			if !rp.has(key) {
				return true
			}
		}
	}
	return false
}

// Rang is told of a key a rule of another member of the group wrote (its
// doorbell rang): the key is added, as in Wrote, its state read.
func (h *Hub) Rang(key string) {
	if h.missing(key) {
		h.queue(job{key: key})
	}
}

// SetHints gives the hub the other members' patterns, in a group: a key
// a rule of the host writes rings the doorbells of the members with a
// pattern matching it.
func (h *Hub) SetHints(gh Hints) { h.hints.Store(&gh) }

// ringAll rings each doorbell with key (host/internal/group/hints.go). A
// failure only costs the other member the wait for its rescan.
func (h *Hub) ringAll(ctx context.Context, key string, bells []string) {
	for _, b := range bells {
		if _, err := h.client.Set(ctx, []byte(b), []byte(key), protocol.SetOptions{}); err != nil && ctx.Err() == nil {
			h.log.Debug("group: ringing a member's doorbell failed; it finds the key at its rescan", "doorbell", b, "key", key, "err", err)
		}
	}
}

// PatternList returns the patterns the host's rules watch, sorted.
func (h *Hub) PatternList() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Sorted(maps.Keys(h.subs))
}

// discover adds key, written by writer (known: what it wrote), to every
// rule watching a pattern it matches that does not have it yet.
func (h *Hub) discover(ctx context.Context, key, writer string, known *protocol.GetResult) {
	h.mu.Lock()
	var rules []sub
	for _, s := range h.subs {
		if !s.pat.Match(key) {
			continue
		}
		for rp := range s.rules {
			if !slices.Contains(rules, rp) {
				rules = append(rules, rp)
			}
		}
	}
	h.mu.Unlock()
	slices.SortFunc(rules, func(a, b sub) int { return strings.Compare(a.order(), b.order()) })
	for _, rp := range rules {
		rp.discovered(ctx, key, writer, known)
	}
}

// Stats are a host's pattern watch counters (host.PatternStats).
type Stats struct {
	Patterns   int    // patterns watched by the host's rules (each counted once)
	Scans      uint64 // scans of the store (SCAN walks: keys, watch_pattern, rescans)
	Pages      uint64 // SCAN pages they read
	FoundLate  uint64 // keys a rule got after its pattern's first scan (a rescan, a rule's write, a reconnection)
	OverLimit  uint64 // keys not watched because a rule had max_watched_keys already
	ScanErrors uint64 // scans that failed (other than offline)
}

// Stats returns the hub's counters.
func (h *Hub) Stats() Stats {
	h.mu.Lock()
	n := len(h.subs)
	h.mu.Unlock()
	return Stats{Patterns: n, Scans: h.scans.Load(), Pages: h.pages.Load(), FoundLate: h.late.Load(),
		OverLimit: h.overLimit.Load(), ScanErrors: h.scanErrors.Load()}
}
