package host

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/protocol"
)

// This file is the rules' verbs of key families (ABI revision 3): keys,
// watch_pattern and unwatch_pattern. The scans are the patternHub's
// (patternhub.go), a rule's patterns and keys its rulePatterns'
// (patternrule.go).

// Pattern watch settings (RuleConfig.Rescan, RuleConfig.MaxWatchedKeys).
const (
	// DefaultRescan is how often a pattern is scanned again for keys
	// created since.
	DefaultRescan = 10 * time.Second
	// RescanOff in RuleConfig.Rescan scans a pattern only when it is
	// watched (and on a reload or reconnection): `rescan: 0` in ssrun.yaml.
	RescanOff time.Duration = -1
	// DefaultMaxWatchedKeys bounds the keys a rule's patterns cover.
	DefaultMaxWatchedKeys = 10_000
)

// hasReservedPrefix reports whether key is the host's own.
func hasReservedPrefix(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// compilePattern compiles pattern for verb and checks it against the
// rule's permissions perms (each a list as in RuleConfig.Read).
func (b *binding) compilePattern(verb, pattern string, perms ...[]string) (patterns.Pattern, error) {
	if b.in.closed.Load() {
		return patterns.Pattern{}, abi.Errorf(abi.StatusUnavailable, "%s %q: this version of %s was replaced or stopped", verb, pattern, b.r.name)
	}
	return compilePattern(verb, pattern, b.r.name, perms...)
}

// compilePattern compiles pattern for verb of rule and checks it against
// perms: INVALID when malformed, DENIED when outside them.
func compilePattern(verb, pattern, rule string, perms ...[]string) (patterns.Pattern, error) {
	pat, err := patterns.Compile(pattern)
	if err != nil {
		return patterns.Pattern{}, abi.Errorf(abi.StatusInvalid, "%s %.200q: %v", verb, pattern, err)
	}
	for _, p := range perms {
		if err := pat.Check(ReservedPrefix, p); err != nil {
			return patterns.Pattern{}, abi.Errorf(abi.StatusDenied, "%s %q: %v (rule %s)", verb, pattern, err, rule)
		}
	}
	return pat, nil
}

// Keys implements abi.Host: the store's keys matching pattern that the
// rule may read, read from the store even in a dry run or a canary's
// shadow (staged writes are not listed).
func (b *binding) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	cfg := b.r.config()
	limit := opts.Limit
	if limit == 0 {
		limit = abi.DefaultKeysLimit
	}
	if limit < 0 || limit > abi.MaxKeysLimit {
		return nil, abi.Errorf(abi.StatusInvalid, "keys %.200q: limit %d is not between 1 and %d (0: %d)", pattern, opts.Limit, abi.MaxKeysLimit, abi.DefaultKeysLimit)
	}
	if _, err := b.compilePattern("keys", pattern, cfg.Read); err != nil {
		return nil, err
	}
	keys, complete, err := b.r.svc.pats.scan(ctx, pattern, limit, func(k string) bool { return allowed(cfg.Read, k) })
	if err != nil {
		return nil, storeError(err)
	}
	if !complete {
		return nil, abi.Errorf(abi.StatusLimit, "keys %q: more than %d keys match (pass a larger limit, up to %d, or a narrower pattern)", pattern, limit, abi.MaxKeysLimit)
	}
	return keys, nil
}

// WatchPattern implements abi.Host. The keys the pattern matches now are
// counted first: more than the rule's max_watched_keys fails with LIMIT
// (offline, the count waits for the first scan). The watch is staged while
// the version starts, as Watch's are; the pattern's scans (patternHub)
// then register its keys and give them to the rule.
func (b *binding) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	cfg := b.r.config()
	pat, err := b.compilePattern("watch_pattern", pattern, cfg.Read, cfg.Watch)
	if err != nil {
		return err
	}
	_, complete, err := b.r.svc.pats.scan(ctx, pattern, cfg.MaxWatchedKeys, func(k string) bool { return patternReadable(cfg, k) })
	switch {
	case errors.Is(err, protocol.ErrNotConnected):
	case err != nil:
		return storeError(err)
	case !complete:
		return abi.Errorf(abi.StatusLimit, "watch_pattern %q: more than max_watched_keys (%d) keys match (rule %s; raise max_watched_keys in ssrun.yaml or narrow the pattern)", pattern, cfg.MaxWatchedKeys, b.r.name)
	}
	return b.r.pats.watch(ctx, b.in, pat, opts)
}

// UnwatchPattern implements abi.Host.
func (b *binding) UnwatchPattern(ctx context.Context, pattern string) error {
	if b.in.closed.Load() {
		return abi.Errorf(abi.StatusUnavailable, "unwatch_pattern %q: this version of %s was replaced or stopped", pattern, b.r.name)
	}
	return b.r.pats.unwatch(ctx, b.in, pattern)
}

// last returns the version of key the rule's previous owner in a group
// handled ("" for deleted); false when it handled none, and on the rule's
// first run.
func (p *progress) last(key string) (version string, ok bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	v, ok := p.seen[key]
	return v, ok && !p.fresh
}

func (h recorded) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	keys, err := h.b.Keys(ctx, pattern, opts)
	h.done(Call{Verb: "keys", Key: pattern, Limit: opts.Limit, Keys: keys}, err)
	return keys, err
}

func (h recorded) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	err := h.b.WatchPattern(ctx, pattern, opts)
	h.done(Call{Verb: "watch_pattern", Key: pattern, Self: opts.Self}, err)
	return err
}

func (h recorded) UnwatchPattern(ctx context.Context, pattern string) error {
	err := h.b.UnwatchPattern(ctx, pattern)
	h.done(Call{Verb: "unwatch_pattern", Key: pattern}, err)
	return err
}
