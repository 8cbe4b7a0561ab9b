package host

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
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// TimerLateTolerance is how long after its deadline a timer's event may
// reach the rule's handler and still not be marked late. A timer found past
// its deadline when its rule loads (the host was down) is always late.
const TimerLateTolerance = 100 * time.Millisecond

const (
	// timerWriteAttempts bounds the tries to record a firing (delete a
	// one-shot timer's record, or move a periodic one's deadline).
	timerWriteAttempts = 3
	// timerLoadWorkers is how many store reads loading a rule's timers (or
	// deleting them) keeps in flight.
	timerLoadWorkers = 16
)

// ruleTimers are the timers of one rule. They belong to the rule, not to a
// version of it: a reload keeps them, and a timer armed by a version that is
// starting (or found in the store when the rule loads) is held until that
// version is live, so it never fires into the version it replaces.
//
// Durability (see timerstore.go for the keys): arm writes the timer's record
// (and its name into the index) before it returns; cancel deletes them. A
// firing is recorded after the handler returns: a one-shot timer's record is
// deleted, a periodic one's deadline moved to the next period. So delivery
// is at least once: a host that stops (or is killed, or loses the store)
// between the event and that write fires the timer again when the rule
// loads next, late. A periodic timer re-arms from its deadline, not from
// its firing; periods that passed meanwhile (the host was down, the rule
// busy) are skipped: one late event, then the next period still ahead.
type ruleTimers struct {
	rule string
	svc  *services
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
	live       any             // the version that runs (an *instance); nil before the first
	held       []*timers.Timer // waiting for a version to be live
	waiting    []*timers.Timer // due, but the mailbox was full: queued as it drains (refill)
	parked     atomic.Bool
	stopped    bool
	// Until a version of the rule is first live, prior holds, for each
	// timer name that version's start armed or cancelled, the store's
	// record as it was before (see timerundo.go); discarded once the
	// failed load was undone: no arm or cancel goes through after it.
	prior     map[string]priorRecord
	discarded bool
}

func newRuleTimers(s *services, rule string, box *mailbox.Box) *ruleTimers {
	return &ruleTimers{rule: rule, svc: s, box: box}
}

// arm arms (or re-arms) the timer name for the version that calls it. The
// arguments are checked by the binding; limit is the rule's max_timers.
func (rt *ruleTimers) arm(ctx context.Context, version any, name string, delay, every time.Duration, payload []byte, limit int) error {
	rt.io.Lock()
	defer rt.io.Unlock()
	if err := rt.loadLocked(ctx); err != nil {
		return err
	}
	if err := rt.notePrior(ctx, "timer", name); err != nil {
		return err
	}
	deadline := rt.svc.timers.Clock.NowMs() + delay.Milliseconds()
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
func (rt *ruleTimers) notePrior(ctx context.Context, verb, name string) error {
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
		res, err := rt.svc.kv.Get(ctx, []byte(key), protocol.CallOptions{})
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
func (rt *ruleTimers) indexed(shard int, name string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if _, ok := rt.idx[shard][name]; !ok {
		rt.shardLocked(shard)[name] = nil
	}
}

// shardLocked returns the names of shard, made if there are none yet.
// A rule has a map only for the shards its timers use (most rules none).
func (rt *ruleTimers) shardLocked(shard int) map[string]*timers.Timer {
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
func (rt *ruleTimers) install(version any, shard int, t *timers.Timer) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if old := rt.idx[shard][t.Name]; old != nil {
		rt.svc.timers.Unschedule(old)
	} else {
		rt.armed++
	}
	rt.shardLocked(shard)[t.Name] = t
	rt.placeLocked(t, version)
}

// cancel disarms the timer name: NOT_FOUND when none is armed.
func (rt *ruleTimers) cancel(ctx context.Context, name string) error {
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
		rt.svc.log.Warn("timer index not updated", "rule", rt.rule, "timer", name, "err", err)
	}
	return nil
}

// forget removes the armed timer t (of shard) and returns its shard's names.
func (rt *ruleTimers) forget(t *timers.Timer, shard int) []string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.svc.timers.Unschedule(t)
	delete(rt.idx[shard], t.Name)
	rt.armed--
	return rt.namesLocked(shard, "", "")
}

// namesLocked returns the names of shard, plus add, minus drop.
func (rt *ruleTimers) namesLocked(shard int, add, drop string) []string {
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

// unreadableDir is the directory's entry in ruleTimers.unreadable.
const unreadableDir = -1

// writeIndex stores shard as names (deleting it when empty), then the
// directory if the shard's presence in it changed.
func (rt *ruleTimers) writeIndex(ctx context.Context, shard int, names []string) error {
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
func (rt *ruleTimers) placeLocked(t *timers.Timer, version any) {
	if rt.stopped {
		return
	}
	if rt.live != nil && (version == nil || version == rt.live) {
		t.Held = false
		rt.svc.timers.Schedule(t, t.Deadline)
		return
	}
	t.Held = true
	rt.held = append(rt.held, t)
}

// goLive makes version (an *instance; nil: the live one stays) the live
// version and schedules the held timers: those it armed while it started,
// those loaded from the store, and those a version that failed to start
// armed.
func (rt *ruleTimers) goLive(version any) {
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
			rt.svc.timers.Schedule(t, t.Deadline)
		}
	}
	rt.held = nil
}

// currentLocked reports whether t is the armed timer of its name (not
// cancelled, re-armed or fired for good since).
func (rt *ruleTimers) currentLocked(t *timers.Timer) bool {
	return rt.idx[timers.TimerShard(t.Name)][t.Name] == t
}

// OwnerName implements timerOwner.
func (rt *ruleTimers) OwnerName() string { return rt.rule }

// Fire implements timerOwner: it queues t's event in the rule's mailbox,
// or, when the mailbox is full, keeps it waiting until there is room
// (refill): a timer is never dropped for a full mailbox.
func (rt *ruleTimers) Fire(t *timers.Timer, _ int64) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.stopped || t.Inflight || !rt.currentLocked(t) {
		return
	}
	t.Inflight = true
	if len(rt.waiting) > 0 || rt.box.Push(rt.deliveryLocked(t)) != mailbox.Queued {
		rt.waiting = append(rt.waiting, t)
		rt.parked.Store(true)
	}
}

func (rt *ruleTimers) deliveryLocked(t *timers.Timer) mailbox.Delivery {
	return mailbox.Delivery{Ev: abi.Event{Op: abi.OpTimer, Key: t.Name, Value: bytes.Clone(t.Payload), Deadline: t.Deadline}, Timer: t}
}

// refill queues the timers waiting for room in the mailbox, in order, as
// far as there is room. The rule's worker calls it after taking an event.
func (rt *ruleTimers) refill() {
	if !rt.parked.Load() {
		return
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	i := 0
	for ; i < len(rt.waiting); i++ {
		t := rt.waiting[i]
		if !rt.currentLocked(t) || rt.stopped {
			continue
		}
		if rt.box.Push(rt.deliveryLocked(t)) != mailbox.Queued {
			break
		}
	}
	n := copy(rt.waiting, rt.waiting[i:])
	clear(rt.waiting[n:])
	rt.waiting = rt.waiting[:n]
	rt.parked.Store(n > 0)
}

// hold keeps the queued timer t until a version of the rule is live again
// (goLive), late if late.
func (rt *ruleTimers) hold(t *timers.Timer, late bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !t.Inflight || !rt.currentLocked(t) || rt.stopped {
		return
	}
	t.Inflight, t.Held = false, true
	t.Late = t.Late || late
	rt.held = append(rt.held, t)
}

// again holds the timer name, whose event a worker was abandoned in: its
// firing was not recorded, so the next live version gets it, late.
func (rt *ruleTimers) again(name string) {
	rt.mu.Lock()
	t := rt.idx[timers.TimerShard(name)][name]
	rt.mu.Unlock()
	if t != nil {
		rt.hold(t, true)
	}
}

// take is called by the worker before it hands t's event to the handler:
// false when t was cancelled or re-armed since it was queued (its event is
// dropped); otherwise it marks the event late when it is.
func (rt *ruleTimers) take(t *timers.Timer, ev *abi.Event) bool {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if !t.Inflight || !rt.currentLocked(t) {
		return false
	}
	ev.Late = t.Late || rt.svc.timers.Clock.NowMs()-t.Deadline > TimerLateTolerance.Milliseconds()
	return true
}

// fired records t's firing once the handler returned: a one-shot timer is
// deleted, a periodic one moves to its next deadline (the next multiple of
// its period after its deadline that is still ahead). A timer cancelled or
// re-armed meanwhile is left alone. Store writes are tried a few times; one
// that still fails is logged (the store then keeps the old record, and the
// timer fires again, late, when the rule loads next).
func (rt *ruleTimers) fired(t *timers.Timer) {
	rt.io.Lock()
	defer rt.io.Unlock()
	rt.mu.Lock()
	if !rt.currentLocked(t) {
		rt.mu.Unlock()
		return
	}
	t.Inflight, t.Late = false, false
	deadline, every := t.Deadline, t.Every
	rt.mu.Unlock()
	ctx := rt.svc.ctx
	key := timers.TimerKey(rt.rule, t.Name)
	if every == 0 {
		rt.retry(ctx, "delete the record of a fired timer", t.Name, func(ctx context.Context) error {
			return delTimerKey(ctx, rt.svc, rt.rule, key)
		})
		shard := timers.TimerShard(t.Name)
		names := rt.forget(t, shard)
		rt.retry(ctx, "update the timer index", t.Name, func(ctx context.Context) error {
			return rt.writeIndex(ctx, shard, names)
		})
		return
	}
	next := deadline + every
	if now := rt.svc.timers.Clock.NowMs(); next <= now {
		next += ((now-next)/every + 1) * every // skip the periods that passed
	}
	rec := timers.EncodeTimerRecord(next, every, t.Payload)
	rt.retry(ctx, "move a periodic timer to its next deadline", t.Name, func(ctx context.Context) error {
		return setTimerKey(ctx, rt.svc, rt.rule, key, rec)
	})
	rt.mu.Lock()
	defer rt.mu.Unlock()
	t.Deadline = next
	rt.placeLocked(t, nil)
}

// retry runs f up to timerWriteAttempts times, and logs its last error.
func (rt *ruleTimers) retry(ctx context.Context, what, name string, f func(ctx context.Context) error) {
	for attempt := 1; ; attempt++ {
		err := f(ctx)
		if err == nil {
			return
		}
		if fenceRefused(err) { // the rule is not this host's any more: its next owner records the timer
			rt.svc.log.Debug("timer: "+what+" refused: the rule's ownership was lost; not retried",
				"rule", rt.rule, "timer", name, "err", err)
			return
		}
		if attempt == timerWriteAttempts || ctx.Err() != nil {
			rt.svc.log.Error("timer: could not "+what+"; the timer fires again when the rule loads next",
				"rule", rt.rule, "timer", name, "attempts", attempt, "err", err)
			return
		}
		serial.Sleep(rt.svc.clock, rt.svc.quiet, time.Duration(attempt)*100*time.Millisecond, ctx.Done())
	}
}

// stop unschedules every timer: the rule is stopped (removed, shut down, or
// it failed to load). The store keeps them (but see undo, for a failed
// first load).
func (rt *ruleTimers) stop() {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.stopped = true
	for _, m := range rt.idx {
		for _, t := range m {
			if t != nil {
				rt.svc.timers.Unschedule(t)
			}
		}
	}
	rt.held, rt.waiting = nil, nil
	rt.parked.Store(false)
}

// names returns the names of the armed timers, sorted.
func (rt *ruleTimers) names() []string {
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

// count is the number of armed timers.
func (rt *ruleTimers) count() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.armed
}

// load reads the rule's timers from the store, once: they are held until
// a version of the rule is live (goLive). A failure is returned (the next
// arm, cancel or reconnection tries again).
func (rt *ruleTimers) load(ctx context.Context) error {
	rt.io.Lock()
	defer rt.io.Unlock()
	return rt.loadLocked(ctx)
}

// loadLocked is load with io held: the directory, the shards it lists, and
// the records they name. Records absent from the store are dropped from the
// index; a value that does not decode is skipped and logged with its key.
// A timer whose deadline has passed fires at once, late.
func (rt *ruleTimers) loadLocked(ctx context.Context) error {
	rt.mu.Lock()
	loaded := rt.loaded
	rt.mu.Unlock()
	if loaded {
		return nil
	}
	c := rt.svc.kv
	res, err := c.Get(ctx, []byte(timers.TimerDirKey(rt.rule)), protocol.CallOptions{})
	if err != nil {
		return rt.loadError(err)
	}
	var dir timers.TimerDir
	unreadable := map[int]bool{}
	if res.Found {
		if dir, err = timers.DecodeTimerDir(res.Value); err != nil {
			rt.svc.log.Warn("timer directory unreadable: reading every shard", "rule", rt.rule, "key", timers.TimerDirKey(rt.rule), "err", err)
			dir = timers.AllTimerShards()
			unreadable[unreadableDir] = true
		}
	}
	var shards []int
	for i := range timers.TimerShards {
		if dir.Has(i) {
			shards = append(shards, i)
		}
	}
	names := make([][]string, len(shards))
	bad := make([]bool, len(shards))
	err = parallel(ctx, len(shards), func(ctx context.Context, i int) error {
		key := timers.TimerShardKey(rt.rule, shards[i])
		res, err := c.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil || !res.Found {
			return err
		}
		if names[i], err = timers.DecodeTimerShard(res.Value); err != nil {
			rt.svc.log.Warn("timer index shard unreadable: skipped, and kept as it is", "rule", rt.rule, "key", key, "err", err)
			names[i] = nil
			bad[i] = true
		}
		return nil
	})
	for i, b := range bad {
		if b {
			unreadable[shards[i]] = true
		}
	}
	if err != nil {
		return rt.loadError(err)
	}
	type found struct {
		name string
		t    *timers.Timer // nil: the record is unreadable
		ok   bool          // the record exists
	}
	var all []found
	for _, ns := range names {
		for _, n := range ns {
			all = append(all, found{name: n})
		}
	}
	now := rt.svc.timers.Clock.NowMs()
	err = parallel(ctx, len(all), func(ctx context.Context, i int) error {
		key := timers.TimerKey(rt.rule, all[i].name)
		res, err := c.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil || !res.Found {
			return err
		}
		all[i].ok = true
		deadline, every, payload, err := timers.DecodeTimerRecord(res.Value)
		if err != nil {
			rt.svc.log.Warn("timer record unreadable: skipped", "rule", rt.rule, "key", key, "err", err)
			return nil
		}
		all[i].t = &timers.Timer{Owner: rt, Name: all[i].name, Payload: payload, Deadline: deadline, Every: every,
			Late: deadline < now, Index: -1}
		return nil
	})
	if err != nil {
		return rt.loadError(err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, f := range all {
		if !f.ok {
			continue
		}
		rt.shardLocked(timers.TimerShard(f.name))[f.name] = f.t
		if f.t != nil {
			rt.armed++
			rt.placeLocked(f.t, nil)
		}
	}
	rt.dir = dir
	rt.unreadable = unreadable
	rt.loaded = true
	return nil
}

func (rt *ruleTimers) loadError(err error) error {
	return status.StoreError(fmt.Errorf("the timers of rule %s could not be read from the store: %w", rt.rule, err))
}

// drop deletes the rule's timers from the store (its file was deleted):
// every record, then the index. What cannot be deleted is logged and stays.
func (rt *ruleTimers) drop(ctx context.Context) {
	rt.io.Lock()
	defer rt.io.Unlock()
	if err := rt.loadLocked(ctx); err != nil {
		rt.svc.log.Error("the timers of a removed rule stay in the store", "rule", rt.rule, "err", err)
		return
	}
	rt.mu.Lock()
	var records, index []string
	for _, m := range rt.idx {
		for name := range m {
			records = append(records, timers.TimerKey(rt.rule, name))
		}
	}
	for shard := range timers.TimerShards {
		if rt.dir.Has(shard) {
			index = append(index, timers.TimerShardKey(rt.rule, shard))
		}
	}
	rt.idx, rt.armed = nil, 0
	rt.mu.Unlock()
	del := func(keys []string) int {
		var failed atomic.Int64
		_ = parallel(ctx, len(keys), func(ctx context.Context, i int) error {
			if err := delTimerKey(ctx, rt.svc, rt.rule, keys[i]); err != nil {
				if failed.Add(1) == 1 {
					rt.svc.log.Error("timer of a removed rule not deleted", "rule", rt.rule, "key", keys[i], "err", err)
				}
			}
			return nil
		})
		return int(failed.Load())
	}
	// Records first: the index stays a superset of them if this stops.
	if n := del(records); n > 0 {
		rt.svc.log.Error("timers of a removed rule stay in the store", "rule", rt.rule, "not_deleted", n)
		return
	}
	if n := del(append(index, timers.TimerDirKey(rt.rule))); n > 0 {
		rt.svc.log.Error("the timer index of a removed rule stays in the store", "rule", rt.rule, "not_deleted", n)
		return
	}
	rt.mu.Lock()
	rt.dir = timers.TimerDir{}
	rt.mu.Unlock()
	rt.svc.log.Info("timers of the removed rule deleted", "rule", rt.rule, "timers", len(records))
}

// parallel runs f(ctx, i) for i in [0, n) on up to timerLoadWorkers
// goroutines, and waits for them. The first error cancels the rest and is
// returned.
func parallel(ctx context.Context, n int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, timerLoadWorkers) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return nil
}
