package host

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// binding is the abi.Host one version of a rule calls. While the version
// starts (before the swap) its watches are staged, not applied, so the old
// version keeps its own; once swapped in it is live.
type binding struct {
	r      *rule
	live   atomic.Bool
	closed atomic.Bool
	staged map[string]abi.WatchOptions // guarded by r.mu while not live
}

var _ abi.Host = (*binding)(nil)

func newBinding(r *rule) *binding {
	return &binding{r: r, staged: map[string]abi.WatchOptions{}}
}

func (b *binding) check(verb, key string, patterns []string) error {
	if b.closed.Load() {
		return abi.Errorf(abi.StatusUnavailable, "%s %q: this version of %s was replaced or stopped", verb, key, b.r.name)
	}
	if key == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty key", verb)
	}
	if !allowed(patterns, key) {
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted for rule %s", verb, key, b.r.name)
	}
	return nil
}

func (b *binding) cfg() RuleConfig {
	b.r.mu.Lock()
	defer b.r.mu.Unlock()
	return b.r.cfg
}

func (b *binding) checkValue(verb, key string, value []byte, cfg RuleConfig) error {
	if len(value) > cfg.MaxValueBytes {
		return abi.Errorf(abi.StatusTooLarge, "%s %q: value of %d bytes exceeds the rule's limit of %d", verb, key, len(value), cfg.MaxValueBytes)
	}
	return nil
}

// Get implements abi.Host.
func (b *binding) Get(ctx context.Context, key string) (abi.Value, error) {
	if err := b.check("get", key, b.cfg().Read); err != nil {
		return abi.Value{}, err
	}
	res, err := b.r.h.client.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return abi.Value{}, storeError(err)
	}
	if !res.Found {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: res.Value, Version: res.Version.String()}, nil
}

// Set implements abi.Host.
func (b *binding) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	cfg := b.cfg()
	if err := b.check("set", key, cfg.Write); err != nil {
		return "", err
	}
	if err := b.checkValue("set", key, value, cfg); err != nil {
		return "", err
	}
	if opts.Cond > abi.CondNEX {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: unknown condition %d", key, opts.Cond)
	}
	if opts.TTL < 0 || (opts.TTL > 0 && opts.TTL < time.Millisecond) {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: ttl must be 0 (none) or at least 1 ms", key)
	}
	token, err := b.r.fenceToken("set", key, opts.Fence)
	if err != nil {
		return "", err
	}
	so := protocol.SetOptions{Expiry: opts.TTL, FencingToken: token}
	switch opts.Cond {
	case abi.CondNX:
		so.Condition = protocol.CondNX
	case abi.CondNEX:
		so.Condition = protocol.CondNEX
	}
	end := b.r.beginSet(key, opts.TTL)
	res, err := b.r.h.client.Set(ctx, []byte(key), value, so)
	if err != nil {
		end("", false)
		return "", storeError(err)
	}
	version := res.Version.String()
	if !res.Applied {
		end("", false)
		return version, abi.Errorf(abi.StatusNotApplied, "set %q: condition not met", key)
	}
	end(version, false)
	return version, nil
}

// Del implements abi.Host.
func (b *binding) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	if err := b.check("del", key, b.cfg().Write); err != nil {
		return err
	}
	token, err := b.r.fenceToken("del", key, opts.Fence)
	if err != nil {
		return err
	}
	end := b.r.beginWrite(key)
	n, err := b.r.h.client.Del(ctx, []byte(key), protocol.DelOptions{FencingToken: token})
	end("", err == nil && n == 1)
	return deleteResult("del", key, n, err)
}

// VDel implements abi.Host.
func (b *binding) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	cfg := b.cfg()
	if err := b.check("vdel", key, cfg.Write); err != nil {
		return err
	}
	if err := b.checkValue("vdel", key, value, cfg); err != nil {
		return err
	}
	token, err := b.r.fenceToken("vdel", key, opts.Fence)
	if err != nil {
		return err
	}
	end := b.r.beginWrite(key)
	n, err := b.r.h.client.VDel(ctx, []byte(key), value, protocol.DelOptions{FencingToken: token})
	end("", err == nil && n == 1)
	return deleteResult("vdel", key, n, err)
}

func deleteResult(verb, key string, n int64, err error) error {
	switch {
	case err != nil:
		return storeError(err)
	case n == 1:
		return nil
	case n == 0:
		return abi.Errorf(abi.StatusNotFound, "%s %q: not found", verb, key)
	default:
		return abi.Errorf(abi.StatusNotApplied, "%s %q: value differs", verb, key)
	}
}

// Watch implements abi.Host.
func (b *binding) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	if err := b.check("watch", key, b.cfg().Watch); err != nil {
		return err
	}
	b.r.mu.Lock()
	if !b.live.Load() {
		b.staged[key] = opts
		b.r.mu.Unlock()
		return nil
	}
	b.r.mu.Unlock()
	return b.r.addWatch(ctx, key, opts)
}

// Unwatch implements abi.Host.
func (b *binding) Unwatch(ctx context.Context, key string) error {
	if err := b.check("unwatch", key, nil); err != nil {
		return err
	}
	b.r.mu.Lock()
	if !b.live.Load() {
		_, ok := b.staged[key]
		delete(b.staged, key)
		b.r.mu.Unlock()
		if !ok {
			return abi.Errorf(abi.StatusNotFound, "unwatch %q: not watched", key)
		}
		return nil
	}
	b.r.mu.Unlock()
	return b.r.removeWatch(ctx, key)
}

// Lock implements abi.Host.
func (b *binding) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	if err := b.checkLock("lock", name); err != nil {
		return "", err
	}
	return b.r.lock(ctx, name, ttl, opts.Wait)
}

// Unlock implements abi.Host.
func (b *binding) Unlock(ctx context.Context, name string) error {
	if err := b.checkLock("unlock", name); err != nil {
		return err
	}
	return b.r.unlock(ctx, name)
}

// checkLock checks a lock name against the rule's permissions. A lease is a
// write of its key (SET NEX PX, VDEL to release), so it needs write
// permission as well as lock permission. Both are checked before any store
// request: a denied lock neither creates the key nor tells whether it exists.
func (b *binding) checkLock(verb, name string) error {
	cfg := b.cfg()
	if err := b.check(verb, name, cfg.Lock); err != nil {
		return err
	}
	if !allowed(cfg.Write, name) {
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted for rule %s (a lock writes its key, which the rule may not write)", verb, name, b.r.name)
	}
	return nil
}

// Log implements abi.Host. Every runtime's logs arrive here (log calls,
// Lua's print, WebAssembly and plugin output), held to the rule's log
// budget.
func (b *binding) Log(level int32, msg string) {
	b.r.logs.write(slogLevel(level), msg)
}
