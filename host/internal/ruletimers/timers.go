package ruletimers

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// A rule's timers: arming and cancelling them, keeping the store's index
// (shards and directory) in step, and holding them until a version of the
// rule is live. Their firings are firing.go's, loading and dropping them
// load.go's.

const (
	// timerWriteAttempts bounds the tries to record a firing (delete a
	// one-shot timer's record, or move a periodic one's deadline).
	timerWriteAttempts = 3
	// timerLoadWorkers is how many store reads loading a rule's timers (or
	// deleting them) keeps in flight.
	timerLoadWorkers = 16
)

// Timers are the timers of one rule. They belong to the rule, not to a
// version of it: a reload keeps them, and a timer armed by a version that is
// starting (or found in the store when the rule loads) is held until that
// version is live, so it never fires into the version it replaces.
//
// Durability (see host/internal/timers' timerstore.go for the keys): Arm
// writes the timer's record (and its name into the index) before it
// returns; Cancel deletes them. A firing is recorded after the handler
// returns: a one-shot timer's record is deleted, a periodic one's deadline
// moved to the next period. So delivery is at least once: a host that stops
// (or is killed, or loses the store) between the event and that write
// fires the timer again when the rule loads next, late. A periodic timer re-arms from its deadline, not from
// its firing; periods that passed meanwhile (the host was down, the rule
// busy) are skipped: one late event, then the next period still ahead.
type Timers struct {
	rule string
	svc  *Services
	box  *mailbox.Box

	// io is held across the store writes of arm, cancel, a firing's
	// record, load and drop: one at a time reads, changes and writes a
	// shard of the index.
	io sync.Mutex

	mu     sync.Mutex
	loaded bool
	idx    map[int]map[string]*timers.Timer // shard -> the names in the store's index; nil: indexed, not armed
	dir    timers.TimerDir                  // the directory as stored
	// unreadable: the index values that did not decode when loaded (shard
	// numbers; -1 the directory), which are never overwritten: they may be
	// another format version's, listing timers this host cannot see.
	unreadable map[int]bool
	armed      int
	live       Version         // the version that runs (the host's *instance); nil before the first
	held       []*timers.Timer // waiting for a version to be live
	waiting    []*timers.Timer // due, but the mailbox was full: queued as it drains (Refill)
	parked     atomic.Bool
	stopped    bool
	// Until a version of the rule is first live, prior holds, for each
	// timer name that version's start armed or cancelled, the store's
	// record as it was before (see undo.go); discarded once the
	// failed load was undone: no arm or cancel goes through after it.
	prior     map[string]priorRecord
	discarded bool
}

// New returns the timers of the rule named rule (its file name), whose
// events go to box (nil for timers that are only dropped: Drop).
func New(s *Services, rule string, box *mailbox.Box) *Timers {
	return &Timers{rule: rule, svc: s, box: box}
}

// Arm arms (or re-arms) the timer name for the version that calls it. The
// arguments are checked by the binding; limit is the rule's max_timers.
func (rt *Timers) Arm(ctx context.Context, version Version, name string, delay, every time.Duration, payload []byte, limit int) error {
	rt.io.Lock()
	defer rt.io.Unlock()
	if err := rt.loadLocked(ctx); err != nil {
		return err
	}
	if err := rt.notePrior(ctx, "timer", name); err != nil {
		return err
	}
	deadline := rt.svc.Scheduler.Clock.NowMs() + delay.Milliseconds()
	shard := timers.TimerShard(name)
	rt.mu.Lock()
	old, indexed := rt.idx[shard][name]
	if old == nil && rt.armed >= limit {
		rt.mu.Unlock()
		return abi.Errorf(abi.StatusQuota, "timer %q: rule %s has %d timers armed, its limit (max_timers)", name, rt.rule, limit)
	}
	var names []string
	if !indexed {
		names = rt.namesLocked(shard, name, "")
	}
	rt.mu.Unlock()
	if !indexed {
		if err := rt.writeIndex(ctx, shard, names); err != nil {
			return status.StoreError(err)
		}
		rt.indexed(shard, name)
	}
	rec := timers.EncodeTimerRecord(deadline, every.Milliseconds(), payload)
	if err := setTimerKey(ctx, rt.svc, rt.rule, timers.TimerKey(rt.rule, name), rec); err != nil {
		return status.StoreError(err)
	}
	rt.install(version, shard, &timers.Timer{Owner: rt, Name: name, Payload: bytes.Clone(payload), Deadline: deadline, Every: every.Milliseconds(), Index: -1})
	return nil
}

// priorRecord is a timer's record in the store before a first load
// changed it: found false when there was none.
type priorRecord struct {
	found bool
	value []byte
}

// notePrior records, once per name until a version is first live, the
// stored record of the timer name, before verb ("timer", "cancel") changes
// it. It refuses the call once the failed load was undone (a start that
// was given up on may still call). io is held and the timers are loaded.
func (rt *Timers) notePrior(ctx context.Context, verb, name string) error {
	rt.mu.Lock()
	if rt.discarded {
		rt.mu.Unlock()
		return abi.Errorf(abi.StatusUnavailable, "%s %q: rule %s failed to load", verb, name, rt.rule)
	}
	if _, noted := rt.prior[name]; noted || rt.live != nil {
		rt.mu.Unlock()
		return nil
	}
	old, indexed := rt.idx[timers.TimerShard(name)][name]
	rt.mu.Unlock()
	var p priorRecord
	switch {
	case old != nil: // loaded from the store, untouched since
		p = priorRecord{found: true, value: timers.EncodeTimerRecord(old.Deadline, old.Every, old.Payload)}
	case indexed: // a record that did not decode: kept as it is
		key := timers.TimerKey(rt.rule, name)
		res, err := rt.svc.Store.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil {
			return status.StoreError(fmt.Errorf("%s %q: read the stored record %s: %w", verb, name, key, err))
		}
		p = priorRecord{found: res.Found, value: res.Value}
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.prior == nil {
		rt.prior = map[string]priorRecord{}
	}
	rt.prior[name] = p
	return nil
}

// indexed notes that the store's index lists name in shard.
func (rt *Timers) indexed(shard int, name string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.idx[shard][name]; !ok {
		rt.shardLocked(shard)[name] = nil
	}
}

// shardLocked returns the names of shard, made if there are none yet.
// A rule has a map only for the shards its timers use (most rules none).
func (rt *Timers) shardLocked(shard int) map[string]*timers.Timer {
	m := rt.idx[shard]
	if m == nil {
		if rt.idx == nil {
			rt.idx = map[int]map[string]*timers.Timer{}
		}
		m = map[string]*timers.Timer{}
		rt.idx[shard] = m
	}
	return m
}

// install makes t, whose record is stored, the armed timer of its name
// (of shard, indexed), replacing the one armed before, and schedules or
// holds it for version.
func (rt *Timers) install(version Version, shard int, t *timers.Timer) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if old := rt.idx[shard][t.Name]; old != nil {
		rt.svc.Scheduler.Unschedule(old)
	} else {
		rt.armed++
	}
	rt.shardLocked(shard)[t.Name] = t
	rt.placeLocked(t, version)
}

// Cancel disarms the timer name: NOT_FOUND when none is armed.
func (rt *Timers) Cancel(ctx context.Context, name string) error {
	rt.io.Lock()
	defer rt.io.Unlock()
	if err := rt.loadLocked(ctx); err != nil {
		return err
	}
	shard := timers.TimerShard(name)
	rt.mu.Lock()
	t := rt.idx[shard][name]
	rt.mu.Unlock()
	if t == nil {
		return abi.Errorf(abi.StatusNotFound, "cancel %q: no timer of that name is armed", name)
	}
	if err := rt.notePrior(ctx, "cancel", name); err != nil {
		return err
	}
	if err := delTimerKey(ctx, rt.svc, rt.rule, timers.TimerKey(rt.rule, name)); err != nil {
		return status.StoreError(err)
	}
	names := rt.forget(t, shard)
	if err := rt.writeIndex(ctx, shard, names); err != nil {
		// The record is gone; a name left in the index is dropped when
		// the rule loads next.
		rt.svc.Log.Warn("timer index not updated", "rule", rt.rule, "timer", name, "err", err)
	}
	return nil
}

// forget removes the armed timer t (of shard) and returns its shard's names.
func (rt *Timers) forget(t *timers.Timer, shard int) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.svc.Scheduler.Unschedule(t)
	delete(rt.idx[shard], t.Name)
	rt.armed--
	return rt.namesLocked(shard, "", "")
}

// namesLocked returns the names of shard, plus add, minus drop.
func (rt *Timers) namesLocked(shard int, add, drop string) []string {
	names := make([]string, 0, len(rt.idx[shard])+1)
	for n := range rt.idx[shard] {
		if n != drop && n != add {
			names = append(names, n)
		}
	}
	if add != "" {
		names = append(names, add)
	}
	return names
}

// unreadableDir is the directory's entry in Timers.unreadable.
const unreadableDir = -1

// writeIndex stores shard as names (deleting it when empty), then the
// directory if the shard's presence in it changed.
func (rt *Timers) writeIndex(ctx context.Context, shard int, names []string) error {
	key := timers.TimerShardKey(rt.rule, shard)
	rt.mu.Lock()
	bad, badDir := rt.unreadable[shard], rt.unreadable[unreadableDir]
	rt.mu.Unlock()
	if bad {
		return abi.Errorf(abi.StatusStoreError, "the timer index %s does not decode (another format version, or damage): not overwritten; delete that key to use its timer names again", key)
	}
	var err error
	if len(names) == 0 {
		err = delTimerKey(ctx, rt.svc, rt.rule, key)
	} else {
		err = setTimerKey(ctx, rt.svc, rt.rule, key, timers.EncodeTimerShard(names))
	}
	if err != nil {
		return err
	}
	rt.mu.Lock()
	dir := rt.dir
	rt.mu.Unlock()
	if dir.Has(shard) == (len(names) > 0) {
		return nil
	}
	if badDir {
		return nil // it counts as listing every shard: kept as it is
	}
	dir.Put(shard, len(names) > 0)
	if dir.Empty() {
		err = delTimerKey(ctx, rt.svc, rt.rule, timers.TimerDirKey(rt.rule))
	} else {
		err = setTimerKey(ctx, rt.svc, rt.rule, timers.TimerDirKey(rt.rule), dir.Encode())
	}
	if err != nil {
		return err
	}
	rt.mu.Lock()
	rt.dir = dir
	rt.mu.Unlock()
	return nil
}

// placeLocked schedules t, or holds it while version (nil: any) is not
// the live one.
func (rt *Timers) placeLocked(t *timers.Timer, version Version) {
	if rt.stopped {
		return
	}
	if rt.live != nil && (version == nil || version == rt.live) {
		t.Held = false
		rt.svc.Scheduler.Schedule(t, t.Deadline)
		return
	}
	t.Held = true
	rt.held = append(rt.held, t)
}

// GoLive makes version (the host's *instance; nil: the live one stays) the live
// version and schedules the held timers: those it armed while it started,
// those loaded from the store, and those a version that failed to start
// armed.
func (rt *Timers) GoLive(version Version) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if version != nil {
		rt.live = version
		rt.prior = nil // the load succeeded: its timer calls stand
	}
	if rt.live == nil || rt.stopped {
		return
	}
	for _, t := range rt.held {
		if t.Held && rt.currentLocked(t) {
			t.Held = false
			rt.svc.Scheduler.Schedule(t, t.Deadline)
		}
	}
	rt.held = nil
}

// currentLocked reports whether t is the armed timer of its name (not
// cancelled, re-armed or fired for good since).
func (rt *Timers) currentLocked(t *timers.Timer) bool {
	return rt.idx[timers.TimerShard(t.Name)][t.Name] == t
}

// Stop unschedules every timer: the rule is stopped (removed, shut down, or
// it failed to load). The store keeps them (but see Undo, for a failed
// first load).
func (rt *Timers) Stop() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.stopped = true
	for _, m := range rt.idx {
		for _, t := range m {
			if t != nil {
				rt.svc.Scheduler.Unschedule(t)
			}
		}
	}
	rt.held, rt.waiting = nil, nil
	rt.parked.Store(false)
}

// Names returns the Names of the armed timers, sorted.
func (rt *Timers) Names() []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for _, m := range rt.idx {
		for name, t := range m {
			if t != nil {
				out = append(out, name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// Count is the number of armed timers.
func (rt *Timers) Count() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.armed
}
