package host

import (
	"context"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/ruletimers"
	"github.com/ssrun/ssrun/host/internal/serial"
)

// What the tools over the host ask of it besides Status and Stats: the
// console (a rule's settings and timers, a dry run), ssrun test and replay
// (the Host behind a rule's abi.Host, a serial host's idleness and turn,
// a rule's timer names).

// HostOf returns the Host whose rule was given h (the abi.Host a runtime
// starts a rule with): ssrun test seeds a rule's random numbers per case
// by it.
func HostOf(h abi.Host) (*Host, bool) {
	hd, ok := h.(handed)
	if !ok {
		return nil, false
	}
	return hd.b.r.svc.host, true
}

// WaitIdle waits until the host is idle (see internal/serial: every event routed
// and handled, no handler running or woken, no internal wake-up pending),
// or ctx ends. Only a serial host (Config.Serial) can tell.
func (h *Host) WaitIdle(ctx context.Context) error {
	if h.quiet == nil {
		return serial.ErrNotSerial
	}
	return h.quiet.WaitIdle(ctx)
}

// Hold takes the turn of a serial host (Config.Serial) as soon as no
// handler holds it: until release is called, no handler starts. ssrun
// test holds it while it loads rules and makes a step's writes, so that
// their effects are handled in the order they happened.
func (h *Host) Hold(ctx context.Context) (release func(), err error) {
	if h.quiet == nil {
		return nil, serial.ErrNotSerial
	}
	return h.quiet.Hold(ctx)
}

// TimerNames returns the names of the timers the rule loaded from path has
// armed, sorted; false when no rule is loaded from path.
func (h *Host) TimerNames(path string) ([]string, bool) {
	r := h.ruleAt(path)
	if r == nil {
		return nil, false
	}
	return r.timers.Names(), true
}

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
