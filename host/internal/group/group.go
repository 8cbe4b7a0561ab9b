package group

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/protocol"
)

// The group's loop (Run): at each step this host joins (its member lease,
// its line in the roster), reads the live members and their rule sets,
// assigns the rules among them, takes over those given to it and hands over
// the others; and, at Close, leaves.

func (g *Group) memberKey(id string) string { return g.key("member/" + id) }

// Run is the group's loop: a step at start, every renewal interval, when the
// roster or a waited-for lease changes, and when a lease is lost.
func (g *Group) Run(ctx context.Context) {
	t := serial.NewWake(g.clock, g.quiet)
	t.Reset(g.ttl / 3)
	defer t.Stop()
	tick := func() {}
	for {
		g.step(ctx)
		tick()
		tick = func() {}
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			t.Reset(g.ttl / 3)
			tick = t.Took
		case <-g.wake:
		case <-g.ls.LostSignal():
		}
	}
}

// step brings this host's part in line with the store: its membership, the
// live members, then the rules it should own.
func (g *Group) step(ctx context.Context) {
	defer g.steps.Add(1)
	for _, l := range g.ls.TakeLost() {
		g.quiet.Work(g.ls.Activity(), -1)
		if rule, ok := g.ruleOfLease(l.Name); ok {
			g.drop(ctx, rule, "its ownership lease was lost")
		}
	}
	mine, digest, roster, err := g.join(ctx)
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("group: cannot join; this host runs none of the group's rules until it can", "group", g.name, "err", err)
		}
		return
	}
	live, err := g.live(ctx, roster)
	var sets map[string]membership.RuleSet
	if err == nil {
		sets, err = g.memberSets(ctx, live, mine, digest)
	}
	if err != nil {
		if ctx.Err() == nil {
			g.log.Warn("group: cannot read the members", "group", g.name, "err", err)
		}
		return
	}
	g.warnDiffering(live, sets)
	if g.reviewFailed(sets) {
		g.Wake() // the next step publishes the new set, then hands over
		return
	}
	g.mu.Lock()
	g.members = g.members[:0]
	for _, e := range live {
		g.members = append(g.members, e.ID)
	}
	ids := slices.Clone(g.members)
	g.mu.Unlock()
	if err := g.hints.sync(ctx, g.reg, g.store, ids); err != nil && ctx.Err() == nil {
		g.log.Debug("group: pattern hints not in step; the rules' rescans find the keys", "group", g.name, "err", err)
	}
	g.mu.Lock()
	rules := make([]string, 0, len(g.paths))
	for r := range g.paths {
		rules = append(rules, r)
	}
	var gone []string
	for r := range g.owned {
		if _, ok := g.paths[r]; !ok {
			gone = append(gone, r)
		}
	}
	g.mu.Unlock()
	for _, r := range gone { // removed from this host's folder
		g.handOver(ctx, r)
	}
	owner := membership.AssignAmong(sets)
	sort.Strings(rules)
	for _, r := range rules { // hand over first: the next owner waits for it
		if owner[r] != g.id && g.isOwned(r) {
			g.handOver(ctx, r)
		}
	}
	for _, r := range rules {
		if ctx.Err() != nil {
			return
		}
		if owner[r] == g.id && !g.isOwned(r) {
			g.take(ctx, r)
		} else if owner[r] != g.id {
			g.unwait(ctx, g.leaseKey(r))
		}
	}
	g.flush(ctx)
}

// ruleOfLease returns the rule whose ownership lease is name.
func (g *Group) ruleOfLease(name string) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for r := range g.owned {
		if g.leaseKey(r) == name {
			return r, true
		}
	}
	return "", false
}

// join holds this host's member lease and keeps its line in the roster,
// naming its rule set as it is now; it returns that set, its digest, and
// the roster as read or as written (with this host's line).
func (g *Group) join(ctx context.Context) (membership.RuleSet, string, []membership.RosterEntry, error) {
	mk := g.memberKey(g.id)
	if l := g.ls.Get(mk); l == nil || l.IsLost() {
		if _, err := g.ls.Lock(ctx, mk, g.ttl, 0); err != nil {
			return nil, "", nil, fmt.Errorf("member lease %s: %w", mk, err)
		}
	}
	// Watched once, and again at the next step if a watch failed: the
	// lease above is held by then, so the watches cannot go with it.
	if !g.watching {
		if err := g.reg.Watch(ctx, g, g.key("roster")); err != nil {
			return nil, "", nil, fmt.Errorf("watch roster: %w", err)
		}
		if err := g.reg.Watch(ctx, g.hints.bell, g.hints.bell.key); err != nil {
			return nil, "", nil, fmt.Errorf("watch doorbell: %w", err)
		}
		g.watching = true
	}
	mine, digest, value := g.ownSet()
	roster, err := g.roster(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if e, ok := membership.EntryOf(roster, g.id); !ok || e.Digest != digest {
		me := membership.RosterEntry{ID: g.id, Digest: digest}
		roster, err = g.editRoster(ctx, func(es []membership.RosterEntry) []membership.RosterEntry { return membership.WithEntry(es, me) },
			&membership.StoredSet{Digest: digest, Value: value})
		if err != nil {
			return nil, "", nil, err
		}
	}
	return mine, digest, roster, nil
}

// roster reads the roster's members (its lines that name none are
// reported, once each).
func (g *Group) roster(ctx context.Context) ([]membership.RosterEntry, error) {
	res, err := g.store.Get(ctx, []byte(g.key("roster")), protocol.CallOptions{})
	if err != nil {
		return nil, fmt.Errorf("read roster: %w", err)
	}
	entries, bad := membership.ParseRoster(res.Value)
	g.warnBadLines(bad)
	return entries, nil
}

// editRoster changes the roster under its lock, its writes fenced with the
// lock's token, and returns the roster written: put, when not nil, is a
// rule set a line of the edited roster names, stored first; the sets no
// line names any more are deleted after, with those this host stored for an
// edit whose roster write failed (g.unnamed).
func (g *Group) editRoster(ctx context.Context, edit func([]membership.RosterEntry) []membership.RosterEntry, put *membership.StoredSet) ([]membership.RosterEntry, error) {
	lk := g.key("roster.lock")
	if _, err := g.ls.Lock(ctx, lk, g.ttl, g.ttl); err != nil {
		return nil, fmt.Errorf("roster lock: %w", err)
	}
	defer func() { _ = g.ls.Unlock(context.WithoutCancel(ctx), lk) }()
	before, err := g.roster(ctx)
	if err != nil {
		return nil, err
	}
	after := edit(before)
	tok, err := g.ls.FenceToken("set", g.key("roster"), lk)
	if err != nil {
		return nil, err
	}
	if put != nil {
		if _, err := g.store.Set(ctx, []byte(g.setKey(put.Digest)), put.Value, protocol.SetOptions{FencingToken: tok}); err != nil {
			return nil, fmt.Errorf("write rule set: %w", err)
		}
	}
	if _, err := g.store.Set(ctx, []byte(g.key("roster")), membership.FormatRoster(after), protocol.SetOptions{FencingToken: tok}); err != nil {
		if put != nil && !slices.ContainsFunc(before, func(e membership.RosterEntry) bool { return e.Digest == put.Digest }) {
			g.unnamed[put.Digest] = true // stored, maybe named by no line
		}
		return nil, fmt.Errorf("write roster: %w", err)
	}
	named := map[string]bool{}
	for _, e := range after {
		named[e.Digest] = true
	}
	stale := make([]string, 0, len(before)+len(g.unnamed))
	for _, e := range before {
		stale = append(stale, e.Digest)
	}
	for d := range g.unnamed {
		stale = append(stale, d)
	}
	clear(g.unnamed)
	for _, d := range stale {
		if named[d] {
			continue
		}
		named[d] = true // deleted once
		if _, err := g.store.Del(ctx, []byte(g.setKey(d)), protocol.DelOptions{FencingToken: tok}); err != nil {
			g.unnamed[d] = true // tried again at the next edit
			g.log.Debug("group: a rule set no member has stays in the store until the next edit of the roster", "group", g.name, "key", g.setKey(d), "err", err)
		}
	}
	return after, nil
}

// live returns the members of entries (the roster join read or wrote)
// whose member key is present, sorted by id; those whose key is gone are
// taken off the roster.
func (g *Group) live(ctx context.Context, entries []membership.RosterEntry) ([]membership.RosterEntry, error) {
	var live []membership.RosterEntry
	var dead []string
	for _, e := range entries {
		if e.ID == g.id {
			live = append(live, e)
			continue
		}
		res, err := g.store.Get(ctx, []byte(g.memberKey(e.ID)), protocol.CallOptions{})
		if err != nil {
			return nil, fmt.Errorf("read member %s: %w", e.ID, err)
		}
		if res.Found {
			live = append(live, e)
		} else {
			dead = append(dead, e.ID)
		}
	}
	if len(dead) > 0 {
		_, err := g.editRoster(ctx, func(es []membership.RosterEntry) []membership.RosterEntry {
			return slices.DeleteFunc(slices.Clone(es), func(e membership.RosterEntry) bool { return slices.Contains(dead, e.ID) })
		}, nil)
		if err != nil {
			g.log.Warn("group: cannot take dead members off the roster", "group", g.name, "members", dead, "err", err)
		}
		g.log.Info("group: members gone", "group", g.name, "members", dead)
	}
	return live, nil
}

// take tries to take the rule over: its ownership lease, then the rule
// itself (loaded, its watched keys resynced). A lease another host still
// holds is watched, so its release or expiry wakes the loop.
func (g *Group) take(ctx context.Context, rule string) {
	lk := g.leaseKey(rule)
	if _, err := g.ls.Lock(ctx, lk, g.ttl, 0); err != nil {
		if abi.StatusOf(err) == abi.StatusBusy {
			g.await(ctx, lk)
			return
		}
		g.log.Warn("group: cannot take the rule's ownership lease", "group", g.name, "rule", rule, "err", err)
		return
	}
	g.unwait(ctx, lk)
	p, err := g.readSeen(ctx, rule)
	if err != nil {
		g.log.Warn("group: cannot read what the rule's last owner handled; taking it over later", "group", g.name, "rule", rule, "err", err)
		_ = g.ls.Unlock(ctx, lk)
		return
	}
	g.mu.Lock()
	path := g.paths[rule]
	g.owned[rule] = true
	g.progress[rule] = p
	g.mu.Unlock()
	// Not cut short by the loop's end: a load stopped halfway (between its
	// start and its install) would leave the rule's worker running; Close
	// ends a load in progress through the host's own closing.
	if err := g.h.LoadOwned(context.WithoutCancel(ctx), path); err != nil {
		g.log.Error("group: rule not loaded; it stays owned here unless another member offers it", "group", g.name, "rule", rule, "err", err)
		return
	}
	g.takeovers.Add(1)
	g.log.Info("group: rule taken over", "group", g.name, "rule", rule)
	g.resync(ctx, rule, p)
}

// reviewFailed withdraws from this host's set the owned rules whose
// version failed to load while another live member (of sets) offers the
// rule, and offers again those withdrawn whose reason no longer holds
// (membership.Withdrawals). It reports whether this host's set changed.
func (g *Group) reviewFailed(sets map[string]membership.RuleSet) bool {
	g.mu.Lock()
	owned := make(map[string]string, len(g.owned)) // rule -> path
	for r := range g.owned {
		if p := g.paths[r]; p != "" {
			owned[r] = p
		}
	}
	none := len(owned) == 0 && len(g.withdrawn) == 0
	g.mu.Unlock()
	if none {
		return false
	}
	var failed []membership.FailedLoad
	for _, r := range slices.Sorted(maps.Keys(owned)) {
		p := owned[r]
		if g.h.RuleAt(p) != nil {
			continue
		}
		if hash, why, ok := g.h.LoadFailure(p); ok {
			failed = append(failed, membership.FailedLoad{Rule: r, Hash: hash, Err: why})
		}
	}
	g.mu.Lock()
	changes := g.withdrawn.Review(g.id, sets, g.hashes, failed)
	if len(changes) > 0 {
		g.mine = nil
	}
	g.mu.Unlock()
	for _, c := range changes {
		if c.Withdrawn {
			g.withdrawals.Add(1)
			g.log.Warn("group: this host's version of the rule fails to load here; another member offers the rule: withdrawn, the rule moves to a member that offers it",
				"group", g.name, "rule", c.Rule, "version", c.Hash, "why", c.Why, "err", c.Err)
		} else {
			g.log.Info("group: this host's version of the rule is offered again", "group", g.name, "rule", c.Rule, "version", c.Hash, "why", c.Why)
		}
	}
	return len(changes) > 0
}

// await watches the ownership lease key lk, held by another host. Held
// past twice the TTL (a lease its holder no longer renews lapses within
// one), it is warned about once, with its holder: a key no host renews
// (written by a client without an expiry) keeps the rule from running
// anywhere until it is deleted.
func (g *Group) await(ctx context.Context, lk string) {
	now := g.clock.Now()
	g.mu.Lock()
	w, was := g.waiting[lk]
	if !was {
		w = &awaited{since: now}
		g.waiting[lk] = w
	}
	warn := !w.warned && now.Sub(w.since) > 2*g.ttl
	w.warned = w.warned || warn
	g.mu.Unlock()
	if !was {
		if err := g.reg.Watch(ctx, g, lk); err != nil {
			g.mu.Lock()
			delete(g.waiting, lk)
			g.mu.Unlock()
		}
	}
	if warn {
		holder := "(unknown)"
		if res, err := g.store.Get(ctx, []byte(lk), protocol.CallOptions{}); err == nil && res.Found {
			holder = string(res.Value[:min(len(res.Value), 200)])
		}
		g.log.Warn("group: the rule's ownership lease held by another holder for over twice the TTL; the rule runs nowhere until it is released or expires (a key written without an expiry never does: delete it)",
			"group", g.name, "key", lk, "holder", holder, "for", now.Sub(w.since).Round(time.Millisecond))
	}
}

// awaited is an ownership lease awaited: since when, and whether it was
// warned about.
type awaited struct {
	since  time.Time
	warned bool
}

// unwait stops watching lk, if it was awaited.
func (g *Group) unwait(ctx context.Context, lk string) {
	g.mu.Lock()
	_, was := g.waiting[lk]
	delete(g.waiting, lk)
	g.mu.Unlock()
	if was {
		g.reg.Unwatch(ctx, g, lk)
	}
}

// handOver gives the rule up for another host: stops it, records what it
// handled, releases its ownership lease.
func (g *Group) handOver(ctx context.Context, rule string) {
	g.stopOwned(ctx, rule)
	g.flushRule(ctx, rule)
	g.mu.Lock()
	delete(g.progress, rule)
	g.mu.Unlock()
	if err := g.ls.Unlock(ctx, g.leaseKey(rule)); err != nil && abi.StatusOf(err) != abi.StatusNotFound {
		g.log.Warn("group: releasing the rule's ownership lease failed; it expires", "group", g.name, "rule", rule, "err", err)
	}
	g.handovers.Add(1)
	g.log.Info("group: rule handed over", "group", g.name, "rule", rule)
}

// drop stops a rule whose ownership was lost: nothing more is written for
// it.
func (g *Group) drop(ctx context.Context, rule, why string) {
	g.stopOwned(ctx, rule)
	g.mu.Lock()
	delete(g.progress, rule)
	g.mu.Unlock()
	g.lost.Add(1)
	g.log.Warn("group: rule lost; another host runs it", "group", g.name, "rule", rule, "reason", why)
}

// stopOwned marks the rule not owned and stops it, keeping its timers.
func (g *Group) stopOwned(ctx context.Context, rule string) {
	g.mu.Lock()
	path := g.paths[rule]
	delete(g.owned, rule)
	g.mu.Unlock()
	if path == "" {
		return // removed from the folder: Remove stopped it
	}
	if err := g.h.Unload(ctx, path); err != nil {
		g.log.Warn("group: stopping the rule", "group", g.name, "rule", rule, "err", err)
	}
}

// Close hands every owned rule over and leaves the group: its member lease
// is released so the others take over at once. The rules were stopped by
// the host.
func (g *Group) Close(ctx context.Context) {
	g.mu.Lock()
	var owned []string
	for r := range g.owned {
		owned = append(owned, r)
	}
	clear(g.paths) // stopped already
	g.mu.Unlock()
	for _, r := range owned {
		g.handOver(ctx, r)
	}
	for _, k := range lockedKeys(&g.mu, g.waiting) {
		g.unwait(ctx, k)
	}
	g.reg.Unwatch(ctx, g, g.key("roster"))
	g.reg.Unwatch(ctx, g.hints.bell, g.hints.bell.key)
	g.hints.leave(ctx, g.reg, g.store)
	g.ls.ReleaseAll(ctx)
}
