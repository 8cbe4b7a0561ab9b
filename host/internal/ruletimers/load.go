package ruletimers

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// Reading a rule's timers from the store when it loads, and deleting them
// from the store when its file is deleted.

// Load reads the rule's timers from the store, once: they are held until
// a version of the rule is live (GoLive). A failure is returned (the next
// arm, cancel or reconnection tries again).
func (rt *Timers) Load(ctx context.Context) error {
	rt.io.Lock()
	defer rt.io.Unlock()
	return rt.loadLocked(ctx)
}

// loadLocked is Load with io held: the directory, the shards it lists, and
// the records they name. Records absent from the store are dropped from the
// index; a value that does not decode is skipped and logged with its key.
// A timer whose deadline has passed fires at once, late.
func (rt *Timers) loadLocked(ctx context.Context) error {
	rt.mu.Lock()
	loaded := rt.loaded
	rt.mu.Unlock()
	if loaded {
		return nil
	}
	c := rt.svc.Store
	res, err := c.Get(ctx, []byte(timers.TimerDirKey(rt.rule)), protocol.CallOptions{})
	if err != nil {
		return rt.loadError(err)
	}
	var dir timers.TimerDir
	unreadable := map[int]bool{}
	if res.Found {
		if dir, err = timers.DecodeTimerDir(res.Value); err != nil {
			rt.svc.Log.Warn("timer directory unreadable: reading every shard", "rule", rt.rule, "key", timers.TimerDirKey(rt.rule), "err", err)
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
			rt.svc.Log.Warn("timer index shard unreadable: skipped, and kept as it is", "rule", rt.rule, "key", key, "err", err)
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
	listed := map[string]bool{}
	for i, ns := range names {
		dups := 0
		for _, n := range ns {
			if listed[n] { // no host lists a name twice: one timer
				dups++
				continue
			}
			listed[n] = true
			all = append(all, found{name: n})
		}
		if dups > 0 {
			rt.svc.Log.Warn("timer index shard lists names more than once: each read once", "rule", rt.rule,
				"key", timers.TimerShardKey(rt.rule, shards[i]), "repeats", dups)
		}
	}
	now := rt.svc.Scheduler.Clock.NowMs()
	err = parallel(ctx, len(all), func(ctx context.Context, i int) error {
		key := timers.TimerKey(rt.rule, all[i].name)
		res, err := c.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil || !res.Found {
			return err
		}
		all[i].ok = true
		deadline, every, payload, err := timers.DecodeTimerRecord(res.Value)
		if err != nil {
			rt.svc.Log.Warn("timer record unreadable: skipped", "rule", rt.rule, "key", key, "err", err)
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

func (rt *Timers) loadError(err error) error {
	return status.StoreError(fmt.Errorf("the timers of rule %s could not be read from the store: %w", rt.rule, err))
}

// Drop deletes the rule's timers from the store (its file was deleted):
// every record, then the index. What cannot be deleted is logged and stays.
func (rt *Timers) Drop(ctx context.Context) {
	rt.io.Lock()
	defer rt.io.Unlock()
	if err := rt.loadLocked(ctx); err != nil {
		rt.svc.Log.Error("the timers of a removed rule stay in the store", "rule", rt.rule, "err", err)
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
					rt.svc.Log.Error("timer of a removed rule not deleted", "rule", rt.rule, "key", keys[i], "err", err)
				}
			}
			return nil
		})
		return int(failed.Load())
	}
	// Records first: the index stays a superset of them if this stops.
	if n := del(records); n > 0 {
		rt.svc.Log.Error("timers of a removed rule stay in the store", "rule", rt.rule, "not_deleted", n)
		return
	}
	if n := del(append(index, timers.TimerDirKey(rt.rule))); n > 0 {
		rt.svc.Log.Error("the timer index of a removed rule stays in the store", "rule", rt.rule, "not_deleted", n)
		return
	}
	rt.mu.Lock()
	rt.dir = timers.TimerDir{}
	rt.mu.Unlock()
	rt.svc.Log.Info("timers of the removed rule deleted", "rule", rt.rule, "timers", len(records))
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
