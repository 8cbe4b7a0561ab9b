package lua

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// heapMetric is the live Go heap as of the last garbage collection. Garbage
// does not count, so allocation churn elsewhere in the process cannot trip
// the guard; memory a call keeps reachable shows after the next collection,
// which a fast-growing heap triggers soon.
const heapMetric = "/gc/heap/live:bytes"

// memGuardInterval is how often a running call's heap growth is sampled.
// The first sample is one interval after the call starts, so calls shorter
// than that are never measured (nor blamed for another's growth).
const memGuardInterval = time.Millisecond

// heapBytes returns the process's live heap bytes (~300 ns).
func heapBytes() int64 {
	s := [1]metrics.Sample{{Name: heapMetric}}
	metrics.Read(s[:])
	return int64(s[0].Value.Uint64())
}

// memGuard cancels a call when the process's live heap has grown by more
// than limit since the call started. gopher-lua cannot account a state's
// memory, so this is the approximation: it sees memory kept reachable by
// every goroutine (another rule's lasting growth during a long call counts
// against this one, its garbage does not), and it acts only after a garbage
// collection and between samples, so a call can overshoot by what it
// allocates until the next collection, or in one Go builtin.
//
// Objects allocated while a collection marks count as live for that cycle,
// so under heavy allocation churn a reading can be a few MB high: keep
// limits well above that (the default is 64 MiB).
type memGuard struct {
	mu     sync.Mutex
	done   bool
	base   int64
	limit  int64
	cancel context.CancelCauseFunc
	timer  *time.Timer
}

// startMemGuard starts watching the heap; cancel (with a cause wrapping
// abi.ErrMemory) stops the
// call when it grows past limit. Call stop when the call returns.
func startMemGuard(limit int64, cancel context.CancelCauseFunc) *memGuard {
	g := &memGuard{base: heapBytes(), limit: limit, cancel: cancel}
	g.mu.Lock()
	g.timer = time.AfterFunc(memGuardInterval, g.check)
	g.mu.Unlock()
	return g
}

func (g *memGuard) check() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	if grown := heapBytes() - g.base; grown > g.limit {
		g.cancel(fmt.Errorf("%w: the heap grew by %d KiB during the call, limit %d KiB", abi.ErrMemory, grown>>10, g.limit>>10))
		return
	}
	g.timer.Reset(memGuardInterval)
}

// stop ends the watch; no check acts after it returns.
func (g *memGuard) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	g.timer.Stop()
}
