package lua

import (
	"context"
	"fmt"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// heapMetric is the Go heap occupied by objects, live or not yet swept.
const heapMetric = "/memory/classes/heap/objects:bytes"

// memGuardInterval is how often a running call's heap growth is sampled.
// The first sample is one interval after the call starts, so calls shorter
// than that are never measured (nor blamed for another's growth).
const memGuardInterval = time.Millisecond

// heapBytes returns the process's current heap object bytes (~300 ns).
func heapBytes() int64 {
	s := [1]metrics.Sample{{Name: heapMetric}}
	metrics.Read(s[:])
	return int64(s[0].Value.Uint64())
}

// memGuard cancels a call when the process heap has grown by more than
// limit since the call started. gopher-lua cannot account a state's memory,
// so this is the approximation: it sees every goroutine's allocations
// (another rule's growth during a long call counts against this one) and
// garbage not yet collected, and it acts only between samples, so a call
// can overshoot by what it allocates in one interval, or in one Go builtin.
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
