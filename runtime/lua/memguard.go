package lua

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// Two readings of the Go heap (~300 ns together):
//   - liveMetric, the live heap as of the last garbage collection: garbage
//     does not count, so allocation churn elsewhere in the process does not
//     trip the guard; memory a call keeps reachable shows once a collection
//     completes;
//   - allocMetric, every heap object including garbage not yet swept: it
//     moves at once, but churn inflates it by tens of MB.
const (
	liveMetric  = "/gc/heap/live:bytes"
	allocMetric = "/memory/classes/heap/objects:bytes"
)

// memGuardInterval is how often a running call's heap growth is sampled.
// The first sample is one interval after the call starts, so calls shorter
// than that are never measured (nor blamed for another's growth).
const memGuardInterval = time.Millisecond

// backstop is how far allocMetric may grow during a call before the call is
// stopped even though no collection has confirmed it: far above churn, it
// catches a bomb that outruns the collector (a string doubling in a loop).
func backstop(limit int64) int64 { return 4*limit + 64<<20 }

func heapBytes() (live, alloc int64) {
	s := [2]metrics.Sample{{Name: liveMetric}, {Name: allocMetric}}
	metrics.Read(s[:])
	return int64(s[0].Value.Uint64()), int64(s[1].Value.Uint64())
}

// memGuard cancels a call when the heap has grown by more than limit since
// the call started. gopher-lua cannot account a state's memory, so this is
// an approximation from process-wide readings:
//   - the live heap (see liveMetric) over the limit stops the call; churn
//     does not count, but objects allocated while a collection marks count as
//     live for that cycle, so a reading can be a few MB high: keep limits
//     well above that (the default is 64 MiB);
//   - all allocation (allocMetric) over backstop(limit) stops it too, for a
//     bomb that outruns the collector;
//   - the readings cannot tell whose memory it is, so only the call that has
//     run longest among those being watched is stopped (a bomb runs until
//     stopped; well-behaved calls are short), and the others are re-based to
//     the heap at that moment, so the stopped call's memory is not counted
//     against them;
//   - checks run every memGuardInterval, so a call can overshoot by what it
//     allocates until the next collection, or in one Go builtin.
type memGuard struct {
	seq       uint64 // start order
	done      bool
	baseLive  int64
	baseAlloc int64
	limit     int64
	cancel    context.CancelCauseFunc
	timer     *time.Timer
}

// guards are the calls being watched; its mutex guards every memGuard.
var guards = struct {
	sync.Mutex
	seq    uint64
	active map[*memGuard]struct{}
}{active: map[*memGuard]struct{}{}}

// startMemGuard starts watching the heap for one call; cancel (with a cause
// wrapping abi.ErrMemory) stops the call. Call stop when the call returns.
func startMemGuard(limit int64, cancel context.CancelCauseFunc) *memGuard {
	live, alloc := heapBytes()
	guards.Lock()
	defer guards.Unlock()
	guards.seq++
	g := &memGuard{seq: guards.seq, baseLive: live, baseAlloc: alloc, limit: limit, cancel: cancel}
	guards.active[g] = struct{}{}
	g.timer = time.AfterFunc(memGuardInterval, g.check)
	return g
}

func (g *memGuard) check() {
	live, alloc := heapBytes()
	guards.Lock()
	defer guards.Unlock()
	if g.done {
		return
	}
	var cause error
	if grown := live - g.baseLive; grown > g.limit {
		cause = fmt.Errorf("%w: the live heap grew by %d KiB during the call, limit %d KiB", abi.ErrMemory, grown>>10, g.limit>>10)
	} else if grown := alloc - g.baseAlloc; grown > backstop(g.limit) {
		cause = fmt.Errorf("%w: the heap grew by %d KiB during the call, faster than garbage collection, limit %d KiB", abi.ErrMemory, grown>>10, g.limit>>10)
	}
	if cause != nil && g.oldestLocked() {
		g.cancel(cause)
		g.done = true
		delete(guards.active, g)
		for o := range guards.active {
			o.baseLive, o.baseAlloc = max(o.baseLive, live), max(o.baseAlloc, alloc)
		}
		return
	}
	g.timer.Reset(memGuardInterval)
}

// oldestLocked reports whether g started before every other watched call.
func (g *memGuard) oldestLocked() bool {
	for o := range guards.active {
		if o.seq < g.seq {
			return false
		}
	}
	return true
}

// stop ends the watch; no check acts after it returns.
func (g *memGuard) stop() {
	guards.Lock()
	defer guards.Unlock()
	g.done = true
	delete(guards.active, g)
	g.timer.Stop()
}
