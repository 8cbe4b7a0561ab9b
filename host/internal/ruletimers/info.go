package ruletimers

import (
	"slices"
	"strings"
	"time"
)

// What the admin console shows of a rule's timers.

// Info is a pending timer of a rule.
type Info struct {
	Name        string
	Due         time.Time     // on the host's clock; zero while held (armed by a version not yet live)
	Every       time.Duration // 0: fires once
	PayloadSize int
	Firing      bool // its event is in the mailbox or being handled
}

// Info returns the armed timers, by name.
func (rt *Timers) Info() []Info {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []Info
	for _, m := range rt.idx {
		for name, t := range m {
			if t == nil {
				continue
			}
			ti := Info{Name: name, Every: time.Duration(t.Every) * time.Millisecond, PayloadSize: len(t.Payload), Firing: t.Inflight}
			if !t.Held {
				ti.Due = time.UnixMilli(t.Deadline)
			}
			out = append(out, ti)
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return strings.Compare(a.Name, b.Name) })
	return out
}
