package host

import (
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/ssrun/ssrun/host/internal/loadretry"
)

// loadOutcomes keeps the rule files that failed to load while no version
// of them runs: Status lists them, in StateLoadFailed, until they load or
// are removed, and Stats counts those this host is to run (Stats.LoadFailed,
// readiness in package admin): in a group, not a version withdrawn nor a
// rule another member owns (host/internal/group/ready.go).
type loadOutcomes struct {
	mu     sync.Mutex
	failed map[string]loadFailure // by path
	// retries loads again the files whose start failed (loadretry.go).
	retries *loadretry.Retries
}

// loadFailure is a rule file that failed to load.
type loadFailure struct {
	kind string
	hash [32]byte
	err  string
	at   time.Time
}

// note records the outcome of loading the file at path, a rule of kind
// with content hash, whose slot is r (nil when none is loaded): err is nil
// when the file's content runs. A failure is the rule's last error: a
// loaded rule goes on with its previous version, in StateReloadFailed; a
// file not loaded is listed in StateLoadFailed, and loaded again later when
// retry is set (its start failed: loadretry.go).
func (o *loadOutcomes) note(r *rule, path, kind string, hash [32]byte, err error, retry bool) {
	if r != nil {
		r.loaded(err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil || r != nil {
		delete(o.failed, path)
		o.retries.Drop(path)
		return
	}
	if o.failed == nil {
		o.failed = map[string]loadFailure{}
	}
	now := o.retries.Clock.Now()
	o.failed[path] = loadFailure{kind: kind, hash: hash, err: clip(err.Error()), at: now}
	if retry {
		o.retries.Failed(path, hash, now)
	} else {
		o.retries.Drop(path)
	}
}

// failedAt reports whether the file at path failed to load (and has not
// loaded since).
func (o *loadOutcomes) failedAt(path string) bool {
	_, ok := o.failure(path)
	return ok
}

// failure returns the last load of the file at path, when it failed (and
// it has not loaded since).
func (o *loadOutcomes) failure(path string) (loadFailure, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.failed[path]
	return f, ok
}

// forget drops what note recorded of the file at path (it is gone).
func (o *loadOutcomes) forget(path string) {
	o.mu.Lock()
	delete(o.failed, path)
	o.retries.Drop(path)
	o.mu.Unlock()
}

// count returns how many files failed to load, leaving out those that
// excused (when not nil) reports: in a group, the shared rules another
// member is to run (host/internal/group/ready.go). excused is called
// without o's lock held: it takes the group's.
func (o *loadOutcomes) count(excused func(path string) bool) int {
	o.mu.Lock()
	paths := slices.Collect(maps.Keys(o.failed))
	o.mu.Unlock()
	n := 0
	for _, p := range paths {
		if excused == nil || !excused(p) {
			n++
		}
	}
	return n
}

// list returns the status of the files that failed to load.
func (o *loadOutcomes) list() []RuleStatus {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]RuleStatus, 0, len(o.failed))
	for p, f := range o.failed {
		out = append(out, RuleStatus{Path: p, Kind: f.kind, Hash: shortHash(f.hash), State: StateLoadFailed,
			LastError: f.err, LastErrorAt: f.at, NextRetry: o.retries.At(p)})
	}
	return out
}
