// Package guard is the link of a rule's abi.Host chain that checks each
// call before the links below it see it (docs/architecture.md, "A rule's
// abi.Host"): the version still runs, the key or timer name is well formed
// and not under the host's reserved prefix, the rule may read, write, watch
// or lock it (a pattern by its literal beginning), a value is within the
// rule's limit, the options are valid.
// A call it refuses reaches no store and changes nothing of the rule; the
// links below it check none of this again.
package guard

import (
	"context"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/patterns"
)

// Limits are the rule's permissions and value limit, as its configuration
// has them now (a reload may change them).
type Limits struct {
	// Read, Write, Watch and Lock are the key patterns (doublestar globs)
	// the rule may read, write, watch and lock; nil allows every key.
	Read, Write, Watch, Lock []string
	// MaxValueBytes bounds a set's or vdel's value and a timer's payload.
	MaxValueBytes int
}

// Rule is what the guard knows of the rule whose calls it checks.
type Rule struct {
	Name     string        // the rule, in errors
	Reserved string        // the host's key prefix: no rule key may start with it
	MaxTimer int           // the longest timer name, in bytes
	Limits   func() Limits // the rule's, now
	Closed   func() bool   // the version was replaced or stopped: every call fails
	// Denied, if set, is told of each call refused by the permissions.
	Denied func(verb, key string)
}

// Host checks each call against its rule, then hands it to next.
type Host struct {
	next abi.Host
	r    Rule
}

var _ abi.Host = (*Host)(nil)

// New returns the guard of r in front of next.
func New(next abi.Host, r Rule) *Host { return &Host{next: next, r: r} }

// Allowed reports whether key matches one of patterns (nil allows all).
func Allowed(patterns []string, key string) bool {
	if patterns == nil {
		return true
	}
	for _, p := range patterns {
		if ok, _ := doublestar.Match(p, key); ok {
			return true
		}
	}
	return false
}

// closed is the error of any call made on a version replaced or stopped.
func (h *Host) closed(verb, what string) error {
	if h.r.Closed() {
		return abi.Errorf(abi.StatusUnavailable, "%s %q: this version of %s was replaced or stopped", verb, what, h.r.Name)
	}
	return nil
}

// check checks key for verb, which patterns allow.
func (h *Host) check(verb, key string, patterns []string) error {
	if err := h.closed(verb, key); err != nil {
		return err
	}
	if key == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty key", verb)
	}
	if strings.HasPrefix(key, h.r.Reserved) {
		return abi.Errorf(abi.StatusDenied, "%s %q: keys under %s are reserved for the host", verb, key, h.r.Reserved)
	}
	if !Allowed(patterns, key) {
		if h.r.Denied != nil {
			h.r.Denied(verb, key)
		}
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted for rule %s", verb, key, h.r.Name)
	}
	return nil
}

// checkValue checks a value's size against the rule's limit.
func checkValue(verb, key string, value []byte, l Limits) error {
	if len(value) > l.MaxValueBytes {
		return abi.Errorf(abi.StatusTooLarge, "%s %q: value of %d bytes exceeds the rule's limit of %d", verb, key, len(value), l.MaxValueBytes)
	}
	return nil
}

// checkWrite checks a write of value (nil for a del) to key.
func (h *Host) checkWrite(verb, key string, value []byte) error {
	l := h.r.Limits()
	if err := h.check(verb, key, l.Write); err != nil {
		return err
	}
	return checkValue(verb, key, value, l)
}

// Get implements abi.Host.
func (h *Host) Get(ctx context.Context, key string) (abi.Value, error) {
	if err := h.check("get", key, h.r.Limits().Read); err != nil {
		return abi.Value{}, err
	}
	return h.next.Get(ctx, key)
}

// Set implements abi.Host.
func (h *Host) Set(ctx context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	if err := h.checkWrite("set", key, value); err != nil {
		return "", err
	}
	if opts.Cond > abi.CondNEX {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: unknown condition %d", key, opts.Cond)
	}
	if opts.TTL < 0 || (opts.TTL > 0 && opts.TTL < time.Millisecond) {
		return "", abi.Errorf(abi.StatusInvalid, "set %q: ttl must be 0 (none) or at least 1 ms", key)
	}
	return h.next.Set(ctx, key, value, opts)
}

// Del implements abi.Host.
func (h *Host) Del(ctx context.Context, key string, opts abi.DelOptions) error {
	if err := h.check("del", key, h.r.Limits().Write); err != nil {
		return err
	}
	return h.next.Del(ctx, key, opts)
}

// VDel implements abi.Host.
func (h *Host) VDel(ctx context.Context, key string, value []byte, opts abi.DelOptions) error {
	if err := h.checkWrite("vdel", key, value); err != nil {
		return err
	}
	return h.next.VDel(ctx, key, value, opts)
}

// Watch implements abi.Host.
func (h *Host) Watch(ctx context.Context, key string, opts abi.WatchOptions) error {
	if err := h.check("watch", key, h.r.Limits().Watch); err != nil {
		return err
	}
	return h.next.Watch(ctx, key, opts)
}

// Unwatch implements abi.Host: any key the rule might watch, none reserved.
func (h *Host) Unwatch(ctx context.Context, key string) error {
	if err := h.check("unwatch", key, nil); err != nil {
		return err
	}
	return h.next.Unwatch(ctx, key)
}

// Keys implements abi.Host: its limit, then the version, then the
// pattern against the rule's read permissions.
func (h *Host) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	if opts.Limit < 0 || opts.Limit > abi.MaxKeysLimit {
		return nil, abi.Errorf(abi.StatusInvalid, "keys %.200q: limit %d is not between 1 and %d (0: %d)", pattern, opts.Limit, abi.MaxKeysLimit, abi.DefaultKeysLimit)
	}
	if err := h.closed("keys", pattern); err != nil {
		return nil, err
	}
	if err := h.checkPattern("keys", pattern, h.r.Limits().Read); err != nil {
		return nil, err
	}
	return h.next.Keys(ctx, pattern, opts)
}

// WatchPattern implements abi.Host: the version, then the pattern against
// the rule's read and watch permissions.
func (h *Host) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	if err := h.closed("watch_pattern", pattern); err != nil {
		return err
	}
	l := h.r.Limits()
	if err := h.checkPattern("watch_pattern", pattern, l.Read, l.Watch); err != nil {
		return err
	}
	return h.next.WatchPattern(ctx, pattern, opts)
}

// checkPattern compiles pattern for verb and checks it against perms (each
// a list as in Limits.Read): INVALID when malformed, DENIED when under the
// reserved prefix or outside them (host/internal/patterns: by its literal
// beginning; the keys it matches are filtered one by one).
func (h *Host) checkPattern(verb, pattern string, perms ...[]string) error {
	pat, err := patterns.Compile(pattern)
	if err != nil {
		return abi.Errorf(abi.StatusInvalid, "%s %.200q: %v", verb, pattern, err)
	}
	for _, p := range perms {
		if err := pat.Check(h.r.Reserved, p); err != nil {
			return abi.Errorf(abi.StatusDenied, "%s %q: %v (rule %s)", verb, pattern, err, h.r.Name)
		}
	}
	return nil
}

// UnwatchPattern implements abi.Host.
func (h *Host) UnwatchPattern(ctx context.Context, pattern string) error {
	if err := h.closed("unwatch_pattern", pattern); err != nil {
		return err
	}
	return h.next.UnwatchPattern(ctx, pattern)
}

// Lock implements abi.Host.
func (h *Host) Lock(ctx context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	if err := h.checkLock("lock", name); err != nil {
		return "", err
	}
	return h.next.Lock(ctx, name, ttl, opts)
}

// Unlock implements abi.Host.
func (h *Host) Unlock(ctx context.Context, name string) error {
	if err := h.checkLock("unlock", name); err != nil {
		return err
	}
	return h.next.Unlock(ctx, name)
}

// checkLock checks a lock name against the rule's permissions. A lease is a
// write of its key (SET NEX PX, VDEL to release), so it needs write
// permission as well as lock permission. Both are checked before any store
// request: a denied lock neither creates the key nor tells whether it exists.
func (h *Host) checkLock(verb, name string) error {
	l := h.r.Limits()
	if err := h.check(verb, name, l.Lock); err != nil {
		return err
	}
	if !Allowed(l.Write, name) {
		return abi.Errorf(abi.StatusDenied, "%s %q: not permitted for rule %s (a lock writes its key, which the rule may not write)", verb, name, h.r.Name)
	}
	return nil
}

// Log implements abi.Host.
func (h *Host) Log(level int32, msg string) { h.next.Log(level, msg) }

// Timer implements abi.Host.
func (h *Host) Timer(ctx context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	if err := h.checkTimer("timer", name); err != nil {
		return err
	}
	if delay < 0 || opts.Every < 0 {
		return abi.Errorf(abi.StatusInvalid, "timer %q: delay and every must not be negative", name)
	}
	if opts.Every > 0 && opts.Every < time.Millisecond {
		return abi.Errorf(abi.StatusInvalid, "timer %q: every must be 0 (once) or at least 1 ms", name)
	}
	if l := h.r.Limits(); len(opts.Payload) > l.MaxValueBytes {
		return abi.Errorf(abi.StatusTooLarge, "timer %q: payload of %d bytes exceeds the rule's limit of %d", name, len(opts.Payload), l.MaxValueBytes)
	}
	return h.next.Timer(ctx, name, delay, opts)
}

// Cancel implements abi.Host.
func (h *Host) Cancel(ctx context.Context, name string) error {
	if err := h.checkTimer("cancel", name); err != nil {
		return err
	}
	return h.next.Cancel(ctx, name)
}

// checkTimer checks the name of a timer and that the version still runs.
func (h *Host) checkTimer(verb, name string) error {
	if err := h.closed(verb, name); err != nil {
		return err
	}
	if name == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty timer name", verb)
	}
	if len(name) > h.r.MaxTimer {
		return abi.Errorf(abi.StatusInvalid, "%s: timer name of %d bytes is longer than %d", verb, len(name), h.r.MaxTimer)
	}
	return nil
}

// Now implements abi.Host.
func (h *Host) Now() int64 { return h.next.Now() }
