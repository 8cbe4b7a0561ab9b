package staging

import (
	"bytes"
	"context"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Rule is what a staging link knows of the rule whose writes it stages.
type Rule struct {
	Name   string                  // in each Write
	Holder string                  // the rule's lock holder: its leases' value
	Cause  func() provenance.Cause // the event the calling instance handles
	// Listed returns whether keys of pattern lists a staged key: it
	// matches the pattern, the rule may read it, it is not the host's.
	Listed func(pattern string) func(key string) bool
	// NoTimers: timer and cancel succeed and do nothing (a canary's
	// shadow, whose live version keeps the timers); else they go on.
	NoTimers bool
}

// Host is the link of a rule's abi.Host chain that stages the rule's
// writes in a Staging instead of making them (a dry run, or a canary's
// shadow): set, del, vdel, lock and unlock are staged and reported; get
// reads the staged writes, then the store; keys lists the store's keys as
// the staged writes leave them. The other calls go on to next, the link
// that would have made the writes.
type Host struct {
	next abi.Host
	st   *Staging
	r    Rule
}

var _ abi.Host = (*Host)(nil)

// NewHost returns the staging link of r over st, in front of next.
func NewHost(next abi.Host, st *Staging, r Rule) *Host { return &Host{next: next, st: st, r: r} }

// SetOn is the StageFunc of a set of key to value with opts, made on the
// store it is given (the store, or a staging's layer); *version gets the
// version the store reports: the new one, or the stored one when a
// condition stopped the write (NOT_APPLIED).
func SetOn(ctx context.Context, key string, value []byte, opts abi.SetOptions, version *string) StageFunc {
	so := protocol.SetOptions{Expiry: opts.TTL}
	switch opts.Cond {
	case abi.CondNX:
		so.Condition = protocol.CondNX
	case abi.CondNEX:
		so.Condition = protocol.CondNEX
	}
	return func(st StagedStore, token hlc.HLC) (string, bool, error) {
		so.FencingToken = token
		res, err := st.Set(ctx, []byte(key), value, so)
		if err != nil {
			return "", false, status.StoreError(err)
		}
		*version = res.Version.String()
		if !res.Applied {
			return "", false, abi.Errorf(abi.StatusNotApplied, "set %q: condition not met", key)
		}
		return *version, false, nil
	}
}

// DelOn is the StageFunc of a del of key.
func DelOn(ctx context.Context, key string) StageFunc {
	return func(st StagedStore, token hlc.HLC) (string, bool, error) {
		n, err := st.Del(ctx, []byte(key), protocol.DelOptions{FencingToken: token})
		return "", err == nil && n == 1, status.DeleteResult("del", key, n, err)
	}
}

// VDelOn is the StageFunc of a vdel of key if its value is value.
func VDelOn(ctx context.Context, key string, value []byte) StageFunc {
	return func(st StagedStore, token hlc.HLC) (string, bool, error) {
		n, err := st.VDel(ctx, []byte(key), value, protocol.DelOptions{FencingToken: token})
		return "", err == nil && n == 1, status.DeleteResult("vdel", key, n, err)
	}
}

// write is the Write of op on key by the rule, in the event it handles.
func (h *Host) write(op, key string, value []byte) Write {
	// A copy: the report keeps it, and value is only lent (abi.Host).
	return Write{Rule: h.r.Name, Op: op, Key: key, Value: bytes.Clone(value), Cause: h.r.Cause()}
}

// Get implements abi.Host: the staged writes, then the store.
func (h *Host) Get(ctx context.Context, key string) (abi.Value, error) {
	return GetOn(ctx, h.st, key)
}

// GetOn reads key on st (the store, or a staging's layer) for a rule:
// NOT_FOUND when it is absent.
func GetOn(ctx context.Context, st StagedStore, key string) (abi.Value, error) {
	res, err := st.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return abi.Value{}, status.StoreError(err)
	}
	if !res.Found {
		return abi.Value{}, abi.Errorf(abi.StatusNotFound, "get %q: not found", key)
	}
	return abi.Value{Data: res.Value, Version: res.Version.String()}, nil
}

// Set implements abi.Host.
func (h *Host) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	var version string
	w := h.write("SET", key, value)
	w.TTL, w.Cond, w.Fence = opts.TTL, CondName(opts.Cond), opts.Fence
	err := h.st.Write(ctx, w, h.r.Holder, SetOn(ctx, key, value, opts, &version))
	return version, err
}

// Del implements abi.Host.
func (h *Host) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	w := h.write("DEL", key, nil)
	w.Fence = opts.Fence
	return h.st.Write(ctx, w, h.r.Holder, DelOn(ctx, key))
}

// VDel implements abi.Host.
func (h *Host) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	w := h.write("VDEL", key, value)
	w.Fence = opts.Fence
	return h.st.Write(ctx, w, h.r.Holder, VDelOn(ctx, key, value))
}

// Keys implements abi.Host: the store's keys as next lists them, with the
// keys the rule staged a create of and without those it staged a delete
// of, as the store would list them.
func (h *Host) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	keys, err := h.next.Keys(ctx, pattern, opts)
	if err != nil {
		return nil, err
	}
	keys, err = h.st.Keys(ctx, keys, h.r.Listed(pattern))
	if err != nil {
		return nil, status.StoreError(err)
	}
	if limit := KeysLimit(opts); len(keys) > limit {
		return nil, status.KeysOverLimit(pattern, limit)
	}
	return keys, nil
}

// KeysLimit is the limit of a keys call with opts.
func KeysLimit(opts abi.KeysOptions) int {
	if opts.Limit == 0 {
		return abi.DefaultKeysLimit
	}
	return opts.Limit
}

// Lock implements abi.Host: the lease is taken in the layer for as long as
// the staging lasts (ttl is reported, not applied: the host would renew it).
func (h *Host) Lock(ctx context.Context, name string, ttl time.Duration, _ abi.LockOptions) (string, error) {
	w := h.write("LOCK", name, []byte(h.r.Holder))
	w.TTL = ttl
	return h.st.Lock(ctx, w)
}

// Unlock implements abi.Host.
func (h *Host) Unlock(ctx context.Context, name string) error {
	return h.st.Unlock(ctx, h.write("UNLOCK", name, []byte(h.r.Holder)))
}

// Timer implements abi.Host.
func (h *Host) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	if h.r.NoTimers {
		return nil
	}
	return h.next.Timer(ctx, name, delay, opts)
}

// Cancel implements abi.Host.
func (h *Host) Cancel(ctx context.Context, name string) error {
	if h.r.NoTimers {
		return nil
	}
	return h.next.Cancel(ctx, name)
}

// Watch implements abi.Host: watches are the rule's (next's).
func (h *Host) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	return h.next.Watch(ctx, key, opts)
}

// Unwatch implements abi.Host.
func (h *Host) Unwatch(ctx context.Context, key string) error { return h.next.Unwatch(ctx, key) }

// WatchPattern implements abi.Host.
func (h *Host) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	return h.next.WatchPattern(ctx, pattern, opts)
}

// UnwatchPattern implements abi.Host.
func (h *Host) UnwatchPattern(ctx context.Context, pattern string) error {
	return h.next.UnwatchPattern(ctx, pattern)
}

// Log implements abi.Host.
func (h *Host) Log(level int32, msg string) { h.next.Log(level, msg) }

// Now implements abi.Host.
func (h *Host) Now() int64 { return h.next.Now() }
