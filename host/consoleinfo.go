package host

import "github.com/ssrun/ssrun/host/internal/ruletimers"

// What the admin console shows of a rule besides its status: its settings
// and its pending timers, and whether the host is a dry run.

// TimerInfo is a pending timer of a rule (host/internal/ruletimers).
type TimerInfo = ruletimers.Info

// RuleConfigOf returns the settings of the rule loaded from path (its
// permissions among them); false when no rule is loaded from path.
func (h *Host) RuleConfigOf(path string) (RuleConfig, bool) {
	r := h.ruleAt(path)
	if r == nil {
		return RuleConfig{}, false
	}
	return r.config(), true
}

// Timers returns the pending timers of the rule loaded from path, by
// name; false when no rule is loaded from path.
func (h *Host) Timers(path string) ([]TimerInfo, bool) {
	r := h.ruleAt(path)
	if r == nil {
		return nil, false
	}
	return r.timers.Info(), true
}

// DryRun reports whether the host is a dry run (Config.DryRun): its rules'
// writes never reach the store.
func (h *Host) DryRun() bool { return h.dry != nil }
