package host

import (
	"sync"

	"github.com/ssrun/ssrun/abi"
)

// progress is what an owned rule has handled: the version of each watched
// key at its last handled event ("" when that event deleted it). The owner
// writes it to the rule's seen key every renewal interval and at a
// hand-over, fenced with the ownership lease; the next owner delivers what
// differs from it (resync).
type progress struct {
	mu    sync.Mutex
	seen  map[string]string
	dirty bool
	// fresh is set when no owner recorded anything before: the rule's
	// first run in the group, which starts from the keys' current state as
	// a host's first run does.
	fresh bool
}

// note records a handled change of a watched key.
func (p *progress) note(ev abi.Event) {
	if ev.Op != abi.OpSet && ev.Op != abi.OpDelete {
		return
	}
	v := ev.Version
	if ev.Op == abi.OpDelete {
		v = ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.seen[ev.Key] != v || !p.has(ev.Key) {
		p.seen[ev.Key] = v
		p.dirty = true
	}
}

func (p *progress) has(key string) bool { _, ok := p.seen[key]; return ok }
