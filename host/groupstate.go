package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
)

// GroupConfig makes a host one member of a group of hosts that share the
// rules (see the comment above).
type GroupConfig struct {
	// Name names the group; hosts with the same name on one store share the
	// rules. It may hold letters, digits, '-', '_' and '.'.
	Name string
	// TTL is the membership and ownership lease time (DefaultGroupTTL when
	// zero): a dead host's rules run elsewhere within TTL plus one renewal
	// interval (TTL/3). At least 300 ms.
	TTL time.Duration
}

// DefaultGroupTTL is the group lease time when GroupConfig.TTL is zero.
const DefaultGroupTTL = 10 * time.Second

// StateStandby is the state (RuleStatus.State) of a rule another host of
// the group runs.
const StateStandby = "standby: another host of the group owns it"

// groupHolderRule is the rule name of the group's own leases: their holder
// is "<client id>:" + this.
const groupHolderRule = "$group"

func (c GroupConfig) validate() error {
	if c.Name == "" {
		return errors.New("group: a name is required")
	}
	for _, ch := range c.Name {
		if !(ch == '-' || ch == '_' || ch == '.' || ch >= '0' && ch <= '9' || ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z') {
			return fmt.Errorf("group %q: names hold only letters, digits, '-', '_' and '.'", c.Name)
		}
	}
	if c.TTL != 0 && c.TTL < 300*time.Millisecond {
		return fmt.Errorf("group %q: ttl %v is below the 300ms minimum", c.Name, c.TTL)
	}
	return nil
}

func (g *group) seenKey(rule string) string { return g.key("seen/" + membership.RuleHash(rule)) }

// readSeen reads what the rule's last owner recorded.
func (g *group) readSeen(ctx context.Context, rule string) (*membership.Progress, error) {
	res, err := g.svc.client.Get(ctx, []byte(g.seenKey(rule)), protocol.CallOptions{})
	if err != nil {
		return nil, err
	}
	p := &membership.Progress{Seen: map[string]string{}, Fresh: !res.Found}
	if res.Found {
		if err := json.Unmarshal(res.Value, &p.Seen); err != nil {
			return nil, fmt.Errorf("%s: %w", g.seenKey(rule), err)
		}
	}
	return p, nil
}

// resync re-reads the keys the rule, just taken over, watches, and delivers
// as resync events those that changed since its last owner handled them. On
// the rule's first run in the group it records their current versions
// instead.
func (g *group) resync(ctx context.Context, rule string, p *membership.Progress) {
	g.mu.Lock()
	path := g.paths[rule]
	g.mu.Unlock()
	r := g.h.ruleAt(path)
	if r == nil {
		return
	}
	for _, key := range r.watchedKeys() {
		res, err := g.svc.client.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil {
			g.svc.log.Warn("group: re-reading a watched key of a rule taken over failed", "rule", rule, "key", key, "err", err)
			continue
		}
		cur := ""
		if res.Found {
			cur = res.Version.String()
		}
		p.Mu.Lock()
		prev, had := p.Seen[key]
		if p.Fresh || (had && prev == cur) || (!had && !res.Found) {
			if !had || prev != cur {
				p.Seen[key], p.Dirty = cur, true
			}
			p.Mu.Unlock()
			continue
		}
		p.Mu.Unlock()
		ev := abi.Event{Key: key, Op: abi.OpDelete, Resync: true}
		if res.Found {
			ev.Op, ev.Value, ev.Version = abi.OpSet, res.Value, cur
		}
		g.resyncs.Add(1)
		r.Enqueue(mailbox.Delivery{Ev: ev, Lin: provenance.Lineage{Origin: &provenance.Origin{Key: key, Op: string(ev.Op), Version: ev.Version}}})
	}
	g.flushRule(ctx, rule)
}

// flush writes the progress of every owned rule that handled events since
// its last write.
func (g *group) flush(ctx context.Context) {
	for _, r := range lockedKeys(&g.mu, g.progress) {
		g.flushRule(ctx, r)
	}
}

// lockedKeys returns the keys of m, read under mu.
func lockedKeys[V any](mu *sync.Mutex, m map[string]V) []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// flushRule writes the rule's progress if it changed, fenced with its
// ownership lease.
func (g *group) flushRule(ctx context.Context, rule string) {
	g.mu.Lock()
	p := g.progress[rule]
	g.mu.Unlock()
	if p == nil {
		return
	}
	p.Mu.Lock()
	if !p.Dirty {
		p.Mu.Unlock()
		return
	}
	b, err := json.Marshal(p.Seen)
	p.Dirty = false
	p.Mu.Unlock()
	if err != nil {
		return
	}
	key := g.seenKey(rule)
	tok, err := g.ls.FenceToken("set", key, g.leaseKey(rule))
	if err == nil {
		_, err = g.svc.client.Set(ctx, []byte(key), b, protocol.SetOptions{FencingToken: tok})
	}
	if err != nil {
		p.Mu.Lock()
		p.Dirty = true
		p.Mu.Unlock()
		if ctx.Err() == nil {
			g.svc.log.Warn("group: recording what the rule handled failed", "group", g.name, "rule", rule, "err", err)
		}
	}
}

// group is the host's part in a group: its loop, membership and hand-overs.
// What the rules use of it (fence, progress) is its ownership.
type group struct {
	*ownership
	svc  *services
	h    groupHost
	ttl  time.Duration
	id   string // this host's member id: its client id
	wake chan struct{}

	// Under ownership.mu:
	owned    map[string]bool               // rules this host owns and runs
	waiting  map[string]bool               // ownership lease keys watched while another host holds them
	members  []string                      // live members at the last step
	hashes   map[string]string             // rule name -> content hash: this host's shared rule files
	mine     *membership.StoredSet         // this host's rule set (nil: to be made from hashes)
	sets     map[string]membership.RuleSet // digest -> the rule sets of other members, read once
	warned   map[string]bool               // what was warned about once (warnOnce)
	compared string                        // the members' digests warnDiffering last compared
	// withdrawn holds this host's versions that failed to load while
	// another member offers the rule, left out of mine
	// (groupfailed.go).
	withdrawn membership.Withdrawals

	// unnamed, the loop's own, holds the digests of rule sets this host
	// stored for a roster write that then failed: no line may name them,
	// and the store cannot list keys, so the next edit deletes those its
	// roster does not name (editRoster).
	unnamed map[string]bool

	hints *groupHints // pattern hints to and from the other members (grouppatterns.go)
	// watching: the roster and this member's doorbell are watched (the
	// loop's own; join).
	watching bool

	takeovers, handovers, lost, resyncs, withdrawals atomic.Uint64
	// steps counts the loop's steps (the tests bound a count of takeovers
	// by steps, not by time).
	steps atomic.Uint64
}

// groupHost is what a group needs of its host (grouphost.go).
type groupHost interface {
	// shares reports whether the group shares the rule file at path (not
	// every-host).
	shares(path string) bool
	// loadOwned loads a rule file just taken over; unload stops one handed
	// over or lost, keeping its timers.
	loadOwned(ctx context.Context, path string) error
	unload(ctx context.Context, path string) error
	// ruleAt returns the rule loaded from path, or nil.
	ruleAt(path string) *rule
	// contentHash names the content of the rule file at path in a rule set
	// ("" when it cannot be read).
	contentHash(path string) string
	// loadFailure returns the content hash (as contentHash names it) and
	// the error of the last load of the rule file at path, when it failed
	// and no version of the rule runs; forgetFailure drops it (the file
	// changed while another host runs the rule: its new content has not
	// failed).
	loadFailure(path string) (hash, err string, ok bool)
	forgetFailure(path string)
}

func newGroup(svc *services, h groupHost, cfg GroupConfig) *group {
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultGroupTTL
	}
	own := &ownership{name: cfg.Name,
		ls:       lease.New(svc.leaseServices(), groupHolderRule, nil),
		paths:    map[string]string{},
		progress: map[string]*membership.Progress{}}
	id := svc.client.ClientID()
	hints := newGroupHints(own, id, svc.pats)
	svc.pats.SetHints(hints)
	return &group{
		ownership: own, hints: hints,
		svc: svc, h: h, ttl: ttl, id: id,
		wake:  make(chan struct{}, 1),
		owned: map[string]bool{}, waiting: map[string]bool{},
		hashes: map[string]string{}, sets: map[string]membership.RuleSet{}, warned: map[string]bool{},
		withdrawn: membership.Withdrawals{}, unnamed: map[string]bool{},
	}
}

// signal wakes the group's loop (without blocking).
func (g *group) signal() {
	select {
	case g.wake <- struct{}{}:
	default:
	}
}

// Enqueue makes the group a watcher (registry.go) of its roster and of the
// leases it waits for: any change wakes its loop.
func (g *group) Enqueue(mailbox.Delivery) { g.signal() }

// WatcherName implements watch.Watcher.
func (g *group) WatcherName() string { return "\x00group " + g.name }

// manages reports whether the rule at path is shared by the group (not
// every-host).
func (g *group) manages(path string) bool { return g.h.shares(path) }

// standby records the rule file at path, about to be loaded, and reports
// whether this host must not run it: the group shares it and another host
// owns it (or none yet). Called with the loads lock held.
func (g *group) standby(path string) bool {
	if !g.manages(path) {
		return false
	}
	name := filepath.Base(path)
	hash := g.h.contentHash(path)
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
			g.h.forgetFailure(path)
		}
		g.signal()
	}
	return !owned
}

// forget drops the rule file at path, removed from this host, and reports
// whether the group shared it (then its timers stay in the store for the
// host that takes it over).
func (g *group) forget(path string) bool {
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
		g.signal()
	}
	return known
}

// isOwned reports whether this host owns the rule name.
func (g *group) isOwned(name string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.owned[name]
}

// GroupStatus is a host's view of its group.
type GroupStatus struct {
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
	// (groupfailed.go).
	Withdrawn []string
	// Takeovers, Handovers and Lost count the rules taken over, handed over
	// (to another host, on a rebalance or shutdown) and lost (the ownership
	// lease lapsed or was taken: the host was paused or cut off);
	// Withdrawals the versions withdrawn.
	Takeovers, Handovers, Lost, Withdrawals uint64
}

func (g *group) status() GroupStatus {
	g.mu.Lock()
	s := GroupStatus{Name: g.name, Member: g.id, Members: slices.Clone(g.members),
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
	for _, st := range g.standbyStatus() {
		s.Standby = append(s.Standby, filepath.Base(st.Path))
	}
	sort.Strings(s.Owned)
	sort.Strings(s.Standby)
	sort.Strings(s.Withdrawn)
	return s
}

// standbyStatus lists the rules another host runs, for Status: those this
// host does not own, but for those whose load here failed (Status lists
// them as failed to load, with the error).
func (g *group) standbyStatus() []RuleStatus {
	g.mu.Lock()
	var paths []string
	for r, p := range g.paths {
		if !g.owned[r] {
			paths = append(paths, p)
		}
	}
	g.mu.Unlock()
	var out []RuleStatus
	for _, p := range paths { // outside g.mu: the host's failures are its own
		if _, _, failed := g.h.loadFailure(p); !failed {
			out = append(out, RuleStatus{Path: p, State: StateStandby})
		}
	}
	return out
}
