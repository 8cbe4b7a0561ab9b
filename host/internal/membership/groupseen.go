package membership

import (
	"encoding/json"
	"errors"
	"sync"

	"github.com/ssrun/ssrun/abi"
)

// Progress is what an owned rule has handled: the version of each watched
// key at its last handled event ("" when that event deleted it). The owner
// writes it to the rule's seen key every renewal interval and at a
// hand-over, fenced with the ownership lease; the next owner delivers what
// differs from it (resync).
type Progress struct {
	Mu    sync.Mutex
	Seen  map[string]string
	Dirty bool
	// Fresh is set when no owner recorded anything before: the rule's
	// first run in the group, which starts from the keys' current state as
	// a host's first run does.
	Fresh bool
}

// DecodeSeen decodes a rule's seen record, a JSON object from each
// watched key to its version. Anything else (null, an array, a string) is
// refused: no host wrote it, and a nil map would fail the first Note.
func DecodeSeen(b []byte) (map[string]string, error) {
	var seen map[string]string
	if err := json.Unmarshal(b, &seen); err != nil {
		return nil, err
	}
	if seen == nil {
		return nil, errors.New("not a JSON object")
	}
	return seen, nil
}

// Note records a handled change of a watched key.
func (p *Progress) Note(ev abi.Event) {
	if ev.Op != abi.OpSet && ev.Op != abi.OpDelete {
		return
	}
	v := ev.Version
	if ev.Op == abi.OpDelete {
		v = ""
	}
	p.Mu.Lock()
	defer p.Mu.Unlock()
	if p.Seen[ev.Key] != v || !p.has(ev.Key) {
		p.Seen[ev.Key] = v
		p.Dirty = true
	}
}

func (p *Progress) has(key string) bool { _, ok := p.Seen[key]; return ok }
