package admin

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

// StoreReady is the readiness check of a process with a store client: ready
// while c is connected (and subscribed, so calls can be made). While the
// broker refuses the connection, the check says why (the CONNACK's reason).
func StoreReady(c *protocol.Client) func() error {
	return func() error {
		if c.Connected() {
			return nil
		}
		if r := c.LastRefusal(); r != nil {
			return fmt.Errorf("not connected to the state store: %w", r)
		}
		return errors.New("not connected to the state store")
	}
}

// RulesReady is the readiness check of a rules host: not ready until
// Loaded hands it the host after the first load of the rules folder, then
// ready unless a rule file failed to load (no version of it runs) and
// AllowFailed is false. In a group of hosts, a shared rule whose load
// failed makes only its owner not ready: a member whose version was
// withdrawn, the rule moved to another member that offers it, is ready
// (host.Stats.LoadFailed).
type RulesReady struct {
	// AllowFailed makes a process whose rules did not all load ready anyway
	// (ssrun --ready-allow-failed-rules): the rules that loaded run.
	AllowFailed bool
	h           atomic.Pointer[host.Host]
}

// Loaded marks the first load of the rules done.
func (r *RulesReady) Loaded(h *host.Host) { r.h.Store(h) }

// Check is the readiness check.
func (r *RulesReady) Check() error {
	h := r.h.Load()
	if h == nil {
		return errors.New("rules not loaded yet")
	}
	if n := h.Stats().LoadFailed; n > 0 && !r.AllowFailed {
		return fmt.Errorf("%d rule file(s) failed to load (see the logs; --ready-allow-failed-rules makes this ready anyway)", n)
	}
	return nil
}
