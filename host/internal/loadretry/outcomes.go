package loadretry

import (
	"maps"
	"slices"
	"sync"
	"time"
)

// Outcomes keeps the rule files that failed to load while no version of
// them runs: the host's Status lists them (StateLoadFailed) until they
// load or are removed, and its Stats counts those the host is to run
// (readiness in package admin): in a group, not a version withdrawn nor a
// rule another member owns (host/internal/group). Those whose start
// failed are loaded again by its Retries.
type Outcomes struct {
	// Retries loads again the files whose start failed.
	Retries *Retries

	mu     sync.Mutex
	failed map[string]Failure // by path
}

// Failure is a rule file that failed to load.
type Failure struct {
	Path string
	Kind string
	Hash [32]byte // its content's (zero: it failed before it was read)
	Err  string
	At   time.Time
	// NextRetry is when it is loaded again (zero: when it changes).
	NextRetry time.Time
}

// NewOutcomes returns the outcomes of a host whose failed starts r retries.
func NewOutcomes(r *Retries) *Outcomes { return &Outcomes{Retries: r, failed: map[string]Failure{}} }

// Note records the outcome of loading the file at path, a rule of kind
// with content hash: err (clipped for status) is nil when the file's
// content runs. A failure while a version of the rule runs (loaded) is not
// kept here (the rule shows it); one of a file not loaded is, and the file
// is loaded again later when retry is set (its start failed).
func (o *Outcomes) Note(loaded bool, path, kind string, hash [32]byte, err error, clip func(string) string, retry bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if err == nil || loaded {
		delete(o.failed, path)
		o.Retries.Drop(path)
		return
	}
	now := o.Retries.Clock.Now()
	o.failed[path] = Failure{Path: path, Kind: kind, Hash: hash, Err: clip(err.Error()), At: now}
	if retry {
		o.Retries.Failed(path, hash, now)
	} else {
		o.Retries.Drop(path)
	}
}

// Failed returns the last load of the file at path, when it failed (and
// it has not loaded since).
func (o *Outcomes) Failed(path string) (Failure, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f, ok := o.failed[path]
	return f, ok
}

// Forget drops what Note recorded of the file at path (it is gone).
func (o *Outcomes) Forget(path string) {
	o.mu.Lock()
	delete(o.failed, path)
	o.Retries.Drop(path)
	o.mu.Unlock()
}

// Count returns how many files failed to load, leaving out those that
// excused (when not nil) reports: in a group, the shared rules another
// member is to run. excused is called without o's lock held: it takes the
// group's.
func (o *Outcomes) Count(excused func(path string) bool) int {
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

// List returns the files that failed to load, each with its next retry.
func (o *Outcomes) List() []Failure {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Failure, 0, len(o.failed))
	for _, f := range o.failed {
		f.NextRetry = o.Retries.At(f.Path)
		out = append(out, f)
	}
	return out
}
