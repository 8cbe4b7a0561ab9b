package ruletimers

import (
	"context"
	"sync/atomic"

	"github.com/ssrun/ssrun/host/internal/timers"
)

// A rule's first load that fails is undone in the store too (the host's rule.discard):
// the timer calls its starting version made are reverted, and nothing else.
// Precisely: until a version of the rule is first live, the first arm or
// cancel of each timer name notes the record the store held for it then
// (loaded with the rule's timers: armed by an earlier run of the host, or
// another host). If the load fails, each such name gets that record back (a
// re-armed timer its earlier deadline, period and payload; a cancelled one
// its record and index entry), and a name that had no record is deleted,
// record and index entry. Timers the failed load did not touch stay as they
// are. So a failed first load after a restart loses none of the timers an
// earlier version armed, and one that armed new timers leaves none behind.
// Once a version is live the notes are dropped: a failed reload of a
// running rule keeps what it armed (the timers belong to the rule, and fire
// in the version that runs).

// Undo reverts the timer calls of the rule's first load, which failed (see
// above), and refuses any later one. The index first gains the names whose
// record comes back, then the records are written or deleted, then the
// index loses the names deleted: it stays a superset of the records if
// this stops half way. What cannot be written is logged and stays.
func (rt *Timers) Undo(ctx context.Context) {
	rt.io.Lock()
	defer rt.io.Unlock()
	rt.mu.Lock()
	rt.discarded = true
	prior := rt.prior
	rt.prior = nil
	if rt.live != nil { // it ran: what it armed stands
		prior = nil
	}
	type change struct {
		name string
		priorRecord
	}
	var changes []change
	added := map[int]bool{} // shards that regain a name
	for name, p := range prior {
		changes = append(changes, change{name, p})
		if !p.found {
			continue
		}
		shard := timers.TimerShard(name)
		t, ok := rt.idx[shard][name]
		if !ok {
			added[shard] = true
		} else if t != nil {
			rt.svc.Scheduler.Unschedule(t)
		}
		rt.shardLocked(shard)[name] = nil // indexed; the rule runs no version
	}
	// The index as it was before the load, plus the names that come back.
	grow := map[int][]string{}
	for shard := range added {
		grow[shard] = rt.namesLocked(shard, "", "")
	}
	rt.mu.Unlock()
	if len(changes) == 0 {
		return
	}
	for shard, names := range grow {
		if err := rt.writeIndex(ctx, shard, names); err != nil {
			rt.svc.Log.Error("the timers a failed first load armed or cancelled were not restored", "rule", rt.rule, "err", err)
			return
		}
	}
	gone := make([]bool, len(changes))
	var failed atomic.Int64
	_ = parallel(ctx, len(changes), func(ctx context.Context, i int) error {
		c := changes[i]
		key := timers.TimerKey(rt.rule, c.name)
		var err error
		if c.found {
			err = setTimerKey(ctx, rt.svc, rt.rule, key, c.value)
		} else {
			err = delTimerKey(ctx, rt.svc, rt.rule, key)
		}
		if err != nil {
			if failed.Add(1) == 1 {
				rt.svc.Log.Error("timer of a failed first load not restored", "rule", rt.rule, "key", key, "err", err)
			}
			return nil
		}
		gone[i] = !c.found
		return nil
	})
	// The index without the names deleted.
	rt.mu.Lock()
	shrink := map[int]bool{}
	restored, deleted := 0, 0
	for i, c := range changes {
		switch {
		case gone[i]:
			if t := rt.idx[timers.TimerShard(c.name)][c.name]; t != nil {
				rt.svc.Scheduler.Unschedule(t)
			}
			delete(rt.idx[timers.TimerShard(c.name)], c.name)
			shrink[timers.TimerShard(c.name)] = true
			deleted++
		case c.found:
			restored++
		}
	}
	rt.armed = 0
	for _, m := range rt.idx {
		for _, t := range m {
			if t != nil {
				rt.armed++
			}
		}
	}
	names := map[int][]string{}
	for shard := range shrink {
		names[shard] = rt.namesLocked(shard, "", "")
	}
	rt.mu.Unlock()
	for shard, ns := range names {
		if err := rt.writeIndex(ctx, shard, ns); err != nil {
			// Names left in the index without a record are dropped when
			// the rule loads next.
			rt.svc.Log.Warn("timer index not updated after a failed first load", "rule", rt.rule, "err", err)
		}
	}
	if n := failed.Load(); n > 0 {
		rt.svc.Log.Error("timers of a failed first load stay in the store as it left them", "rule", rt.rule, "not_restored", n)
	}
	rt.svc.Log.Info("timer calls of a failed first load undone", "rule", rt.rule, "deleted", deleted, "restored", restored)
}
