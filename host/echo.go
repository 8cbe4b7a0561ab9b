package host

import "github.com/ssrun/ssrun/abi"

// maxEchoes bounds the versions remembered per key for echo suppression.
const maxEchoes = 32

// echoes are a rule's own writes to keys it watches (without self) whose
// notifications have not come back yet: a rule is not woken by its own
// write. Not safe for concurrent use: the rule guards it.
type echoes struct {
	sets map[string][]string // key -> versions written, awaiting their echo
	dels map[string]int      // key -> DELETE echoes owed
}

func newEchoes() echoes {
	return echoes{sets: map[string][]string{}, dels: map[string]int{}}
}

// wrote records a write: the version it created, or a delete.
func (e *echoes) wrote(key, version string, deleted bool) {
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

// consume reports whether ev is the echo of a write recorded, and forgets
// that write.
func (e *echoes) consume(ev abi.Event) bool {
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

// forget drops what is owed on key (it is no longer watched).
func (e *echoes) forget(key string) {
	delete(e.sets, key)
	delete(e.dels, key)
}

// keepSets drops the versions owed on keys not in watched (a new version
// of the rule stopped watching them).
func (e *echoes) keepSets(watched map[string]abi.WatchOptions) {
	for k := range e.sets {
		if _, ok := watched[k]; !ok {
			delete(e.sets, k)
		}
	}
}
