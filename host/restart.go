package host

import (
	"context"
	"errors"
	"sync"

	"github.com/ssrun/ssrun/abi"
)

// Mode restart (RuleConfig.Mode): a new change of a key cuts the running
// handler call of the same key, as its deadline would (the runtime stops
// it where it can: Lua between instructions, WebAssembly at its next loop
// or call, a plugin's context; as after a timeout a Lua state is kept and
// a WebAssembly instance rebuilt), and the mailbox conflates by
// key always (as in mode latest), so the next call is the key's latest
// change. A cut call is counted in RuleStatus.Restarted, not as a failure.

// errRestarted is the cause of a call's context cut by a newer change.
var errRestarted = errors.New("a newer change of the key restarted the handler")

// cuttable holds the running call that a change of its key may cut, and
// those of a pool (concurrency > 1), one per key.
type cuttable struct {
	mu   sync.Mutex
	key  string
	cut  context.CancelCauseFunc // nil: no call may be cut
	keys map[string]context.CancelCauseFunc
}

// beginCuttable returns the context of a call on ev, which a newer change
// of ev's key cuts when the rule's mode is restart, and the function that
// ends it and reports whether it was cut.
func (r *rule) beginCuttable(ctx context.Context, ev abi.Event) (context.Context, func() bool) {
	if !r.restart.Load() || (ev.Op != abi.OpSet && ev.Op != abi.OpDelete) {
		return ctx, func() bool { return false }
	}
	ctx, cut := context.WithCancelCause(ctx)
	c := &r.running
	c.mu.Lock()
	c.key, c.cut = ev.Key, cut
	c.mu.Unlock()
	return ctx, func() bool {
		c.mu.Lock()
		c.key, c.cut = "", nil
		c.mu.Unlock()
		cut(nil)
		return errors.Is(context.Cause(ctx), errRestarted)
	}
}

// cutRunning cuts the running call of key, if the rule's mode is restart
// and one runs.
func (r *rule) cutRunning(key string) {
	if !r.restart.Load() {
		return
	}
	c := &r.running
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cut != nil && c.key == key {
		c.cut(errRestarted)
	}
	if cut := c.keys[key]; cut != nil {
		cut(errRestarted)
	}
}

// beginCuttableKey is beginCuttable for a call of a pool: the calls of
// different keys run at once, each cut by a newer change of its own key.
func (r *rule) beginCuttableKey(ctx context.Context, ev abi.Event) (context.Context, func() bool) {
	if !r.restart.Load() || (ev.Op != abi.OpSet && ev.Op != abi.OpDelete) {
		return ctx, func() bool { return false }
	}
	ctx, cut := context.WithCancelCause(ctx)
	c := &r.running
	c.mu.Lock()
	if c.keys == nil {
		c.keys = map[string]context.CancelCauseFunc{}
	}
	c.keys[ev.Key] = cut
	c.mu.Unlock()
	return ctx, func() bool {
		c.mu.Lock()
		delete(c.keys, ev.Key)
		c.mu.Unlock()
		cut(nil)
		return errors.Is(context.Cause(ctx), errRestarted)
	}
}
