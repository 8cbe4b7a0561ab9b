package host

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/ssrun/ssrun/host/internal/group"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/rulefile"
)

// The host's side of its group (host/internal/group has the group's loop,
// membership and hand-overs): the group's public types, the host as the
// group sees it (groupHost) and the Group accessor. A shared rule's timer
// keys are fenced by host/internal/ruletimers with the ownership's Fence
// (services.timerServices).

// GroupConfig makes a host one member of a group of hosts that share the
// rules (Config.Group): Name names the group (hosts with the same name on
// one store share the rules; letters, digits, '-', '_' and '.'), TTL is
// the membership and ownership lease time (DefaultGroupTTL when zero; at
// least 300 ms): a dead host's rules run elsewhere within TTL plus one
// renewal interval (TTL/3).
type GroupConfig = group.Config

// GroupStatus is a host's view of its group (Host.Group): its members,
// the rules it owns, those another host runs (Standby) and those it
// withdrew, and counts of takeovers, hand-overs, losses and withdrawals.
type GroupStatus = group.Status

// DefaultGroupTTL is the group lease time when GroupConfig.TTL is zero.
const DefaultGroupTTL = group.DefaultTTL

// StateStandby is the state (RuleStatus.State) of a rule another host of
// the group runs.
const StateStandby = "standby: another host of the group owns it"

// groupHolderRule is the rule name of the group's own leases: their holder
// is "<client id>:" + this.
const groupHolderRule = "$group"

// newGroup makes the host's part in the group cfg, over the host's
// services, and gives the pattern hub its hints.
func newGroup(h *Host, cfg GroupConfig) *group.Group {
	svc := &h.services
	g := group.New(group.Deps{
		Prefix: ReservedPrefix,
		Store:  svc.client,
		Log:    svc.log,
		Reg:    svc.reg,
		Clock:  svc.clock,
		Quiet:  svc.quiet,
		Leases: lease.New(svc.leaseServices(), groupHolderRule, nil),
		Hub:    svc.pats,
		Host:   groupHost{h},
	}, cfg)
	svc.pats.SetHints(g.Hints())
	return g
}

// Group returns the host's view of its group, and false when it is in none
// (Config.Group unset).
func (h *Host) Group() (GroupStatus, bool) {
	if h.group == nil {
		return GroupStatus{}, false
	}
	return h.group.Status(), true
}

// standbyStatus lists the rules another host of the group runs, for
// Status (group.Group.StandbyPaths).
func (h *Host) standbyStatus() []RuleStatus {
	var out []RuleStatus
	for _, p := range h.group.StandbyPaths() {
		out = append(out, RuleStatus{Path: p, State: StateStandby})
	}
	return out
}

// groupHost is the Host as its group calls it (group.Host).
type groupHost struct{ *Host }

var _ group.Host = groupHost{}

// Shares reports whether the group shares the rule file at path.
func (h groupHost) Shares(path string) bool {
	return ruleConfigFor(h.defaults, h.rules, path).Ownership != OwnershipEveryHost
}

// ContentHash names a rule file's content in a group's rule set: the first
// 16 hex digits of its SHA-256 ("" when it cannot be read: its load reports
// why). The sum goes through the host's memo (internal/contenthash), as the
// load's own does, so a big module shared by many files is hashed once.
func (h groupHost) ContentHash(path string) string {
	src, err := rulefile.Read(path)
	if err != nil {
		return ""
	}
	sum := h.hashes.Sum(src)
	return hex.EncodeToString(sum[:8])
}

// LoadFailure returns the content hash (as ContentHash names it) and the
// error of the last load of the rule file at path, when it failed and no
// version of the rule runs (loadretry.Outcomes).
func (h groupHost) LoadFailure(path string) (hash, err string, ok bool) {
	f, ok := h.outcomes.Failed(path)
	if !ok {
		return "", "", false
	}
	if f.Hash == ([32]byte{}) { // it failed before its content was read
		return h.ContentHash(path), f.Err, true
	}
	return hex.EncodeToString(f.Hash[:8]), f.Err, true
}

// ForgetFailure drops the failed load of the rule file at path: its
// content changed while another host of the group runs the rule, and the
// new content has not been loaded yet.
func (h groupHost) ForgetFailure(path string) { h.outcomes.Forget(path) }

// LoadOwned loads the rule file at path, which this host has just taken
// over in its group.
func (h groupHost) LoadOwned(ctx context.Context, path string) error {
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	defer h.unlockLoads()
	return h.loadLocked(ctx, path)
}

// Unload stops the rule loaded from path, which this host no longer owns in
// its group, keeping its timers in the store for the next owner.
func (h groupHost) Unload(ctx context.Context, path string) error {
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", path, err)
	}
	defer h.unlockLoads()
	r := h.takeSlot(path)
	if r == nil {
		return nil
	}
	return h.stopRule(ctx, r, "hand-over")
}

// RuleAt returns the rule loaded from path, or nil.
func (h groupHost) RuleAt(path string) group.Rule {
	if r := h.ruleAt(path); r != nil {
		return groupRule{r}
	}
	return nil
}

// groupRule is a rule as a group resyncs it when taken over (group.Rule).
type groupRule struct{ *rule }

func (r groupRule) WatchedKeys() []string { return r.watchedKeys() }
