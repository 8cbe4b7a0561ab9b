package host

import (
	"context"
	"fmt"
	"sort"
)

// SetRuleConfig replaces the host's rule settings (Config.Defaults and
// Config.Rules) and applies them to the loaded rules without restarting
// them: the next call a rule makes is checked against its new key
// permissions (read, write, watch, lock), value size, timer quota and log
// budget, and its next events against its new mailbox bound and grace.
//
// Three settings are taken when a version of a rule starts, so they apply
// from the rule's next version (its file changed or touched): the call
// timeout and the memory limit, handed to its runtime (a running
// WebAssembly instance cannot shrink its memory), and the concurrency
// (the instances the version starts). A rule's watches of keys its new watch
// permission does not allow are removed (and logged): no further event
// of them reaches it, and its unwatch of them reports NOT_FOUND.
//
// Invalid settings are refused with an error naming the rule pattern, and
// the previous ones stay; so is a max_value the broker cannot carry (see
// ValueHeadroom), when the client is connected. Rules loaded later use the
// new settings.
func (h *Host) SetRuleConfig(ctx context.Context, defaults RuleConfig, rules map[string]RuleConfig) error {
	if err := validateRuleConfigs(defaults, rules); err != nil {
		return err
	}
	limits := valueLimits(defaults, rules)
	if max, ok := h.client.MaxPacketSize(); ok {
		if err := checkCarried(limits, max); err != nil {
			return err
		}
	}
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("rule settings: %w", err)
	}
	defer h.unlockLoads()
	for _, r := range h.loaded() { // refused whole, before any rule changes
		if _, err := loadableConfigFor(defaults, rules, r.path); err != nil {
			return fmt.Errorf("rule settings: %w", err)
		}
	}
	h.defaults, h.rules = defaults, rules
	h.valueLimits.Store(&limits)
	for _, r := range h.loaded() {
		cfg := ruleConfigFor(defaults, rules, r.path)
		r.reconfigure(cfg)
		if gone := r.watchesOutside(cfg.Watch); len(gone) > 0 {
			for _, k := range gone {
				r.dropWatch(ctx, k)
			}
			sort.Strings(gone)
			h.log.Warn("rule's watches of keys its new watch permission does not allow are removed",
				"rule", r.name, "keys", gone)
		}
	}
	return nil
}
