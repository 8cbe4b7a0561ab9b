// Package echo remembers a rule's own writes to the keys it watches until
// their notifications come back, so that a rule is not woken by its own write.
package echo

import "github.com/ssrun/ssrun/abi"

// maxEchoes bounds the versions remembered per key for echo suppression.
const maxEchoes = 32

// Pending are a rule's own writes to keys it watches (without self) whose
// notifications have not come back yet: a rule is not woken by its own
// write. Not safe for concurrent use: the rule guards it.
type Pending struct {
	sets map[string][]string // key -> versions written, awaiting their echo
	dels map[string]int      // key -> DELETE echoes owed
}

func New() Pending {
	return Pending{sets: map[string][]string{}, dels: map[string]int{}}
}

// Wrote records a write: the version it created, or a delete.
func (e *Pending) Wrote(key, version string, deleted bool) {
	if deleted {
		e.dels[key]++
		return
	}
	vs := append(e.sets[key], version)
	if len(vs) > maxEchoes {
		vs = vs[len(vs)-maxEchoes:]
	}
	e.sets[key] = vs
}

// Consume reports whether ev is the echo of a write recorded, and forgets
// that write.
func (e *Pending) Consume(ev abi.Event) bool {
	switch ev.Op {
	case abi.OpSet:
		vs := e.sets[ev.Key]
		for i, v := range vs {
			if v == ev.Version {
				e.sets[ev.Key] = append(vs[:i], vs[i+1:]...)
				if len(e.sets[ev.Key]) == 0 {
					delete(e.sets, ev.Key)
				}
				return true
			}
		}
	case abi.OpDelete:
		if e.dels[ev.Key] > 0 {
			e.dels[ev.Key]--
			if e.dels[ev.Key] == 0 {
				delete(e.dels, ev.Key)
			}
			return true
		}
	}
	return false
}

// Forget drops what is owed on key (it is no longer watched).
func (e *Pending) Forget(key string) {
	delete(e.sets, key)
	delete(e.dels, key)
}

// KeepSets drops the versions owed on keys not in watched (a new version
// of the rule stopped watching them).
func (e *Pending) KeepSets(watched map[string]abi.WatchOptions) {
	for k := range e.sets {
		if _, ok := watched[k]; !ok {
			delete(e.sets, k)
		}
	}
}
