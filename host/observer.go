package host

import (
	"sync"
	"time"
)

// Observer is told about every handler call that returns to its rule, for
// metrics (package admin turns it into a latency histogram). It is called
// on the rule's worker goroutine between two events, so it must be fast and
// must not block or call the Host. A nil Config.Observer costs nothing.
type Observer interface {
	// ObserveHandle reports one call of rule's handler (rule is the file
	// name: the base of RuleStatus.Path, as in the logs): how long it took and
	// whether it returned an error. Calls abandoned as stuck are not
	// reported (they are counted in RuleStatus.Abandoned).
	ObserveHandle(rule string, took time.Duration, failed bool)
}

// loadFailures are the rule files whose last load failed while no version
// of them runs: a folder with a broken rule is not what was asked for
// (Stats.LoadFailed, and readiness in package admin).
type loadFailures struct {
	mu sync.Mutex
	m  map[string]bool // by path
}

// note records how the load of path ended; running tells whether a version
// of it runs (an older one, when a reload failed).
func (f *loadFailures) note(path string, failed, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if failed && !running {
		if f.m == nil {
			f.m = map[string]bool{}
		}
		f.m[path] = true
		return
	}
	delete(f.m, path)
}

// forget drops path: its file is gone.
func (f *loadFailures) forget(path string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.m, path)
}

func (f *loadFailures) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.m)
}
