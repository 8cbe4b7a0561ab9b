package group

import (
	"log/slog"
	"path/filepath"
	"slices"
	"sort"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/internal/serial"
)

// A group's state as this host holds it (the Group), the rule files the
// host tells it of (Standby, Forget), and its Status.

// Group is a host's part in a group: its loop, membership and hand-overs.
// What the rules use of it (Fence, Refenced, ProgressFor) is its Ownership.
type Group struct {
	*Ownership
	store Store
	log   *slog.Logger
	reg   Watches
	clock clock.Clock
	quiet *serial.Quiet
	h     Host
	ttl   time.Duration
	id    string // this host's member id: its client id
	wake  chan struct{}

	// Under Ownership.mu:
	owned    map[string]bool               // rules this host owns and runs
	waiting  map[string]*awaited           // ownership lease keys watched while another host holds them
	members  []string                      // live members at the last step
	hashes   map[string]string             // rule name -> content hash: this host's shared rule files
	mine     *membership.StoredSet         // this host's rule set (nil: to be made from hashes)
	sets     map[string]membership.RuleSet // digest -> the rule sets of other members, read once
	warned   map[string]bool               // what was warned about once (warnOnce)
	compared string                        // the members' digests warnDiffering last compared
	// withdrawn holds this host's versions that failed to load while
	// another member offers the rule, left out of mine
	// (membership.Withdrawals).
	withdrawn membership.Withdrawals

	// unnamed, the loop's own, holds the digests of rule sets this host
	// stored for a roster write that then failed: no line may name them,
	// and the store cannot list keys, so the next edit deletes those its
	// roster does not name (editRoster).
	unnamed map[string]bool

	hints *Hints // pattern hints to and from the other members (hints.go)
	// watching: the roster and this member's doorbell are watched (the
	// loop's own; join).
	watching bool

	takeovers, handovers, lost, resyncs, withdrawals atomic.Uint64
	// steps counts the loop's steps (the tests bound a count of takeovers
	// by steps, not by time).
	steps atomic.Uint64
}

// New makes a host's part in the group cfg (Config.Validate passed it),
// with the host's parts d; Run runs its loop.
func New(d Deps, cfg Config) *Group {
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	own := &Ownership{name: cfg.Name, prefix: d.Prefix,
		ls:       d.Leases,
		paths:    map[string]string{},
		progress: map[string]*membership.Progress{}}
	id := d.Store.ClientID()
	hints := newHints(own, id, d.Hub, d.Log, d.Clock.Now)
	return &Group{
		Ownership: own, hints: hints,
		store: d.Store, log: d.Log, reg: d.Reg, clock: d.Clock, quiet: d.Quiet,
		h: d.Host, ttl: ttl, id: id,
		wake:  make(chan struct{}, 1),
		owned: map[string]bool{}, waiting: map[string]*awaited{},
		hashes: map[string]string{}, sets: map[string]membership.RuleSet{}, warned: map[string]bool{},
		withdrawn: membership.Withdrawals{}, unnamed: map[string]bool{},
	}
}

// Hints returns the group's pattern hints, which the host's pattern hub
// asks, at each write of a rule, which doorbells to ring (Hints.Doorbells).
func (g *Group) Hints() *Hints { return g.hints }

// Wake wakes the group's loop for a step (without blocking).
func (g *Group) Wake() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Enqueue makes the group a watcher (watch.Watcher) of its roster and of the
// leases it waits for: any change wakes its loop.
func (g *Group) Enqueue(mailbox.Delivery) { g.Wake() }

// WatcherName implements watch.Watcher.
func (g *Group) WatcherName() string { return "\x00group " + g.name }

// manages reports whether the rule at path is shared by the group (not
// every-host).
func (g *Group) manages(path string) bool { return g.h.Shares(path) }

// Standby records the rule file at path, about to be loaded, and reports
// whether this host must not run it: the group shares it and another host
// owns it (or none yet). Called with the loads lock held.
func (g *Group) Standby(path string) bool {
	if !g.manages(path) {
		return false
	}
	name := filepath.Base(path)
	hash := g.h.ContentHash(path)
	g.mu.Lock()
	_, known := g.paths[name]
	g.paths[name] = path
	owned := g.owned[name]
	changed := !known || g.hashes[name] != hash
	if changed {
		g.hashes[name] = hash
		delete(g.withdrawn, name) // another version: offered until it fails
		g.mine = nil              // the set changed: the roster line names the new one
	}
	g.mu.Unlock()
	if changed {
		if known && !owned {
			g.h.ForgetFailure(path)
		}
		g.Wake()
	}
	return !owned
}

// Forget drops the rule file at path, removed from this host, and reports
// whether the group shared it (then its timers stay in the store for the
// host that takes it over).
func (g *Group) Forget(path string) bool {
	name := filepath.Base(path)
	g.mu.Lock()
	_, known := g.paths[name]
	delete(g.paths, name)
	if _, had := g.hashes[name]; had {
		delete(g.hashes, name)
		delete(g.withdrawn, name)
		g.mine = nil
	}
	g.mu.Unlock()
	if known {
		g.Wake()
	}
	return known
}

// isOwned reports whether this host owns the rule name.
func (g *Group) isOwned(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.owned[name]
}

// Status is a host's view of its group (host.GroupStatus).
type Status struct {
	Name    string
	Member  string   // this host's id
	Members []string // the live members at the last step
	Owned   []string // rules this host owns (Status tells whether they run)
	// Standby lists the rules another host runs: not those this host owns,
	// nor those whose load here failed (Status lists them as failed to
	// load, with the error).
	Standby []string
	// Withdrawn lists the rules whose version here failed to load while
	// another member offers the rule: this host offers them no more
	// until its file changes or no other member offers the rule
	// (membership.Withdrawals).
	Withdrawn []string
	// Takeovers, Handovers and Lost count the rules taken over, handed over
	// (to another host, on a rebalance or shutdown) and lost (the ownership
	// lease lapsed or was taken: the host was paused or cut off);
	// Withdrawals the versions withdrawn.
	Takeovers, Handovers, Lost, Withdrawals uint64
}

// Status returns the host's view of its group.
func (g *Group) Status() Status {
	g.mu.Lock()
	s := Status{Name: g.name, Member: g.id, Members: slices.Clone(g.members),
		Takeovers: g.takeovers.Load(), Handovers: g.handovers.Load(), Lost: g.lost.Load(), Withdrawals: g.withdrawals.Load()}
	for r := range g.paths {
		if g.owned[r] {
			s.Owned = append(s.Owned, r)
		}
		if _, ok := g.withdrawn[r]; ok {
			s.Withdrawn = append(s.Withdrawn, r)
		}
	}
	g.mu.Unlock()
	for _, p := range g.StandbyPaths() {
		s.Standby = append(s.Standby, filepath.Base(p))
	}
	sort.Strings(s.Owned)
	sort.Strings(s.Standby)
	sort.Strings(s.Withdrawn)
	return s
}

// StandbyPaths lists the paths of the rules another host runs, for the
// host's Status: those this host does not own, but for those whose load
// here failed (Status lists them as failed to load, with the error).
func (g *Group) StandbyPaths() []string {
	g.mu.Lock()
	var paths []string
	for r, p := range g.paths {
		if !g.owned[r] {
			paths = append(paths, p)
		}
	}
	g.mu.Unlock()
	var out []string
	for _, p := range paths { // outside g.mu: the host's failures are its own
		if _, _, failed := g.h.LoadFailure(p); !failed {
			out = append(out, p)
		}
	}
	return out
}

// Resyncs counts the events delivered as resync events to rules taken
// over (host.Stats.Resyncs adds them).
func (g *Group) Resyncs() uint64 { return g.resyncs.Load() }

// Steps counts the loop's steps (the tests bound a count of takeovers by
// steps, not by time).
func (g *Group) Steps() uint64 { return g.steps.Load() }

// Digest returns the digest of this host's rule set as it is now: the one
// its line in the roster names once a step has written it.
func (g *Group) Digest() string {
	_, d, _ := g.ownSet()
	return d
}
