package host

import (
	"slices"
	"strings"
	"time"
)

// What the admin console shows of a rule besides its status: its settings
// and its pending timers, and whether the host is a dry run.

// TimerInfo is a pending timer of a rule.
type TimerInfo struct {
	Name        string
	Due         time.Time     // on the host's clock; zero while held (armed by a version not yet live)
	Every       time.Duration // 0: fires once
	PayloadSize int
	Firing      bool // its event is in the mailbox or being handled
}

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
	return r.timers.info(), true
}

// DryRun reports whether the host is a dry run (Config.DryRun): its rules'
// writes never reach the store.
func (h *Host) DryRun() bool { return h.dry != nil }

func (rt *ruleTimers) info() []TimerInfo {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []TimerInfo
	for _, m := range rt.idx {
		for name, t := range m {
			if t == nil {
				continue
			}
			ti := TimerInfo{Name: name, Every: time.Duration(t.Every) * time.Millisecond, PayloadSize: len(t.Payload), Firing: t.Inflight}
			if !t.Held {
				ti.Due = time.UnixMilli(t.Deadline)
			}
			out = append(out, ti)
		}
	}
	slices.SortFunc(out, func(a, b TimerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}
