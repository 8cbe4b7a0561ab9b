package host

import (
	"context"
	"encoding/hex"
	"fmt"

	"github.com/ssrun/ssrun/host/rulefile"
)

// The host's side of a group (group.go): the groupHost its group calls.

// shares reports whether the group shares the rule file at path.
func (h *Host) shares(path string) bool {
	return ruleConfigFor(h.defaults, h.rules, path).Ownership != OwnershipEveryHost
}

// contentHash names a rule file's content in a group's rule set: the first
// 16 hex digits of its SHA-256 ("" when it cannot be read: its load reports
// why). The sum goes through the host's memo (contenthash.go), as the load's
// own does, so a big module shared by many files is hashed once.
func (h *Host) contentHash(path string) string {
	src, err := rulefile.Read(path)
	if err != nil {
		return ""
	}
	sum := h.hashes.Sum(src)
	return hex.EncodeToString(sum[:8])
}

// loadFailure returns the content hash (as contentHash names it) and the
// error of the last load of the rule file at path, when it failed and no
// version of the rule runs (loadstatus.go).
func (h *Host) loadFailure(path string) (hash, err string, ok bool) {
	f, ok := h.outcomes.Failed(path)
	if !ok {
		return "", "", false
	}
	if f.Hash == ([32]byte{}) { // it failed before its content was read
		return h.contentHash(path), f.Err, true
	}
	return hex.EncodeToString(f.Hash[:8]), f.Err, true
}

// forgetFailure drops the failed load of the rule file at path: its
// content changed while another host of the group runs the rule, and the
// new content has not been loaded yet.
func (h *Host) forgetFailure(path string) { h.outcomes.Forget(path) }

// loadOwned loads the rule file at path, which this host has just taken
// over in its group.
func (h *Host) loadOwned(ctx context.Context, path string) error {
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	defer h.unlockLoads()
	return h.loadLocked(ctx, path)
}

// unload stops the rule loaded from path, which this host no longer owns in
// its group, keeping its timers in the store for the next owner.
func (h *Host) unload(ctx context.Context, path string) error {
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("stop %s: %w", path, err)
	}
	defer h.unlockLoads()
	h.mu.Lock()
	r := h.slots[path]
	delete(h.slots, path)
	h.mu.Unlock()
	if r == nil {
		return nil
	}
	return h.stopRule(ctx, r, "hand-over")
}

// Group returns the host's view of its group, and false when it is in none
// (Config.Group unset).
func (h *Host) Group() (GroupStatus, bool) {
	if h.group == nil {
		return GroupStatus{}, false
	}
	return h.group.status(), true
}
