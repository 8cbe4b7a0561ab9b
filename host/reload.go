package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ssrun/ssrun/host/internal/ruletimers"
	"github.com/ssrun/ssrun/host/rulefile"
	"github.com/ssrun/ssrun/internal/fsfollow"
)

// reloadFollow tunes how WatchDir waits for a write to end (zero: the
// fsfollow defaults); tests lengthen the wait for a file kept open.
var reloadFollow fsfollow.Options

// WatchDir loads every rule in dir, then keeps the running rules in step with
// the folder, and with the rule files named in extra (e.g. plugins outside
// the folder, from ssrun.yaml), until ctx ends: a new or changed file is
// compiled and swapped in (a broken one is reported and the running version
// stays), a removed file's rule is stopped. ready, when non-nil, is closed
// once the initial load is done and the files are being watched.
//
// A file is (re)loaded as soon as its write is over (see package fsfollow:
// closed after writing, renamed into place, a symlink swapped), never while
// it is still open for writing; changes that come together load together.
// A file removed or renamed away stops its rule once it has not come back
// for fsfollow.DefaultQuiet (an editor may write the new version next).
//
// A rule file may be a symlink: its target is watched too, and any change
// in the folder re-reads every linked rule, so a rule follows its target
// being edited or replaced, and the atomic "..data" swap of a Kubernetes
// ConfigMap or Secret volume (whose files are links through "..data").
func (h *Host) WatchDir(ctx context.Context, dir string, ready chan<- struct{}, extra ...string) error {
	w, err := fsfollow.New()
	if err != nil {
		return fmt.Errorf("watch rules folder: %w", err)
	}
	defer w.Close()
	dir = filepath.Clean(dir)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watch rules folder %s: %w", dir, err)
	}
	// A named file is watched through its folder (a rebuild often replaces
	// the file, which ends a watch on the file itself); only events for the
	// named files count there.
	named := map[string]bool{}
	for _, f := range extra {
		f = filepath.Clean(f)
		named[f] = true
		if d := filepath.Dir(f); d != dir {
			if err := w.Add(d); err != nil {
				return fmt.Errorf("watch %s: %w", f, err)
			}
		}
	}
	// Errors are logged per file; the files keep being watched so a fixed
	// one loads.
	_ = h.LoadDir(ctx, dir)
	for f := range named {
		if err := h.Load(ctx, f); err != nil {
			h.logNotLoaded(f, err)
		}
	}
	links := h.followLinks(w, dir, named)
	if ready != nil {
		close(ready)
	}
	pending := map[string]bool{}
	o := reloadFollow
	o.OnError = func(err error) { h.log.Warn("watching rules folder", "dir", dir, "err", err) }
	o.OnChange = func(paths []string) {
		for _, p := range paths {
			p = filepath.Clean(p)
			for _, rule := range links[p] { // the target of a linked rule
				pending[rule] = true
			}
			if filepath.Dir(p) == dir || named[p] {
				pending[p] = true
			}
		}
		// Any change in the folder may be a "..data" swap, and any in a
		// target's folder a change of the target: re-read linked rules.
		for _, rules := range links {
			for _, p := range rules {
				pending[p] = true
			}
		}
		for p := range pending {
			h.reconcile(ctx, p)
		}
		clear(pending)
		links = h.followLinks(w, dir, named)
	}
	fsfollow.Follow(ctx, w, o)
	return nil
}

// reconcile makes the rule at p match the file: load, reload or remove.
func (h *Host) reconcile(ctx context.Context, p string) {
	h.mu.Lock()
	_, loaded := h.slots[p]
	h.mu.Unlock()
	info, err := os.Stat(p)
	if err != nil || !h.IsRule(p) || info.IsDir() {
		if err == nil {
			rulefile.WarnNotRule(h.log, p, info)
		}
		switch {
		case loaded:
			if err := h.Remove(ctx, p); err != nil {
				h.log.Warn("stopping removed rule", "rule", filepath.Base(p), "err", err)
			}
		case h.group != nil && h.group.Forget(p):
			// A rule file of the group this host does not run (another
			// runs it, or its load failed here): it leaves this host's
			// rule set, so it is not assigned here any more.
		default:
			if _, failed := h.outcomes.Failed(p); failed {
				h.dropTimersOf(ctx, p)
			}
		}
		h.outcomes.Forget(p)
		return
	}
	if err := h.Load(ctx, p); err != nil {
		if loaded {
			h.log.Error("reload failed; the previous version keeps running", "rule", filepath.Base(p), "err", err)
		} else {
			h.logNotLoaded(p, err)
		}
	}
}

// dropTimersOf deletes from the store the timers of the rule file at path,
// which is gone and was not running (its load failed): an earlier run may
// have armed some, and a rule of that name added later must not find them.
// Under the loads lock, so that a load of a new file of that name waits.
func (h *Host) dropTimersOf(ctx context.Context, path string) {
	if err := h.lockLoads(ctx); err != nil {
		return // closing: the timers stay, as for a file deleted while no ssrun runs
	}
	defer h.unlockLoads()
	h.mu.Lock()
	_, loaded := h.slots[path]
	h.mu.Unlock()
	if loaded {
		return // loaded again meanwhile: the timers are its
	}
	ruletimers.New(h.timerServices(), filepath.Base(path), nil).Drop(ctx)
}

// followLinks finds the rule files in dir, and those named, that are
// symlinks, and watches the folders of their targets. It returns the rules
// by resolved target.
func (h *Host) followLinks(w *fsfollow.Watcher, dir string, named map[string]bool) map[string][]string {
	paths := make([]string, 0, len(named))
	for p := range named {
		paths = append(paths, p)
	}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if e.Type()&os.ModeSymlink != 0 {
				paths = append(paths, filepath.Join(dir, e.Name()))
			}
		}
	}
	links := map[string][]string{}
	for _, p := range paths {
		if info, err := os.Lstat(p); err != nil || info.Mode()&os.ModeSymlink == 0 || !h.IsRule(p) {
			continue
		}
		target, err := filepath.EvalSymlinks(p)
		if err != nil {
			continue
		}
		links[target] = append(links[target], p)
		// Adding a folder already watched is harmless; a removed one (an
		// old ConfigMap version) is dropped by the watcher itself.
		if err := w.Add(filepath.Dir(target)); err != nil {
			h.log.Warn("watching the target of a linked rule", "rule", filepath.Base(p), "target", target, "err", err)
		}
	}
	return links
}
