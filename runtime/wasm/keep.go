package wasm

import (
	"context"
	"slices"
)

// This file keeps the code of module binaries that no Program uses any
// more, compiled and with their load-check verdict, so that a version seen
// before (a rollback, a rule file saved back, the A/B of a canary) loads
// again without compiling from wazero's cache nor running the load checks,
// which for a Go guest is most of a reload (Config.Keep).

// DefaultKeep is Config.Keep's default.
const DefaultKeep = 4

// idleLocked marks c, whose last Program was released, as kept, the most
// recently released; it returns the kept codes pushed out beyond r.keep,
// gone from r.codes, for the caller to close (closeCode) once r.mu is
// unlocked. r.mu is held.
func (r *Runtime) idleLocked(c *code) (drop []*code) {
	r.idle = append(r.idle, c)
	for len(r.idle) > r.keep {
		old := r.idle[0]
		r.idle = r.idle[1:]
		delete(r.codes, old.hash)
		drop = append(drop, old)
	}
	return drop
}

// reuseLocked takes c, acquired again, off the kept ones. r.mu is held.
func (r *Runtime) reuseLocked(c *code) {
	if c.refs == 0 {
		r.idle = slices.DeleteFunc(r.idle, func(k *code) bool { return k == c })
	}
}

// closeCode closes c's compiled modules (unless the Runtime is closed,
// which closes them all).
func (r *Runtime) closeCode(c *code) {
	if r.enter() != nil {
		return
	}
	defer r.leave()
	_ = c.lock(context.Background())
	defer c.unlock()
	for e, cm := range c.mods {
		_ = cm.Close(context.Background())
		delete(c.mods, e)
	}
}
