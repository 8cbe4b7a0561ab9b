package group

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
)

// What an owned rule handled (membership.Progress), in the store under its
// seen key: read by a new owner, which resyncs the rule from it, and written
// by the owner every renewal interval and at a hand-over, fenced with the
// rule's ownership lease.

func (g *Group) seenKey(rule string) string { return g.key("seen/" + membership.RuleHash(rule)) }

// readSeen reads what the rule's last owner recorded. A record no host
// wrote (not a JSON object of versions) says nothing of what was handled:
// the rule's resync then delivers every watched key that exists again (at
// least once, as after any hand-over), and its next flush replaces the
// record.
func (g *Group) readSeen(ctx context.Context, rule string) (*membership.Progress, error) {
	key := g.seenKey(rule)
	res, err := g.store.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return nil, err
	}
	p := &membership.Progress{Seen: map[string]string{}, Fresh: !res.Found}
	if res.Found {
		seen, err := membership.DecodeSeen(res.Value)
		if err != nil {
			g.log.Warn("group: the record of what the rule's last owner handled is unreadable; its watched keys are delivered again",
				"group", g.name, "rule", rule, "key", key, "err", err)
			p.Dirty = true
			return p, nil
		}
		p.Seen = seen
	}
	return p, nil
}

// resync re-reads the keys the rule, just taken over, watches, and delivers
// as resync events those that changed since its last owner handled them. On
// the rule's first run in the group it records their current versions
// instead.
func (g *Group) resync(ctx context.Context, rule string, p *membership.Progress) {
	g.mu.Lock()
	path := g.paths[rule]
	g.mu.Unlock()
	r := g.h.RuleAt(path)
	if r == nil {
		return
	}
	for _, key := range r.WatchedKeys() {
		res, err := g.store.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil {
			g.log.Warn("group: re-reading a watched key of a rule taken over failed", "rule", rule, "key", key, "err", err)
			continue
		}
		cur := ""
		if res.Found {
			cur = res.Version.String()
		}
		p.Mu.Lock()
		prev, had := p.Seen[key]
		if p.Fresh || (had && prev == cur) || (!had && !res.Found) {
			if !had || prev != cur {
				p.Seen[key], p.Dirty = cur, true
			}
			p.Mu.Unlock()
			continue
		}
		p.Mu.Unlock()
		ev := abi.Event{Key: key, Op: abi.OpDelete, Resync: true}
		if res.Found {
			ev.Op, ev.Value, ev.Version = abi.OpSet, res.Value, cur
		}
		g.resyncs.Add(1)
		r.Enqueue(mailbox.Delivery{Ev: ev, Lin: provenance.Lineage{Origin: &provenance.Origin{Key: key, Op: string(ev.Op), Version: ev.Version}}})
	}
	g.flushRule(ctx, rule)
}

// flush writes the progress of every owned rule that handled events since
// its last write.
func (g *Group) flush(ctx context.Context) {
	for _, r := range lockedKeys(&g.mu, g.progress) {
		g.flushRule(ctx, r)
	}
}

// lockedKeys returns the keys of m, read under mu.
func lockedKeys[V any](mu *sync.Mutex, m map[string]V) []string {
	mu.Lock()
	defer mu.Unlock()
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// flushRule writes the rule's progress if it changed, fenced with its
// ownership lease.
func (g *Group) flushRule(ctx context.Context, rule string) {
	g.mu.Lock()
	p := g.progress[rule]
	g.mu.Unlock()
	if p == nil {
		return
	}
	p.Mu.Lock()
	if !p.Dirty {
		p.Mu.Unlock()
		return
	}
	b, err := json.Marshal(p.Seen)
	p.Dirty = false
	p.Mu.Unlock()
	if err != nil {
		return
	}
	key := g.seenKey(rule)
	tok, err := g.ls.FenceToken("set", key, g.leaseKey(rule))
	if err == nil {
		_, err = g.store.Set(ctx, []byte(key), b, protocol.SetOptions{FencingToken: tok})
	}
	if err != nil {
		p.Mu.Lock()
		p.Dirty = true
		p.Mu.Unlock()
		if ctx.Err() == nil {
			g.log.Warn("group: recording what the rule handled failed", "group", g.name, "rule", rule, "err", err)
		}
	}
}
