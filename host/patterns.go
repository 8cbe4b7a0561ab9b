package host

import (
	"context"
	"errors"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/host/internal/patternwatch"
	"github.com/ssrun/ssrun/host/internal/status"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/protocol"
)

// This file is the rules' verbs of key families (ABI revision 3): keys,
// watch_pattern and unwatch_pattern. The scans are the patternwatch.Hub's,
// a rule's patterns and keys its patternwatch.Rule's
// (host/internal/patternwatch).

// Keys implements abi.Host: the store's keys matching pattern that the
// rule may read (a staging link adds what it staged: host/staging). The
// guard has checked the pattern.
func (b *binding) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	cfg := b.r.config()
	limit := staging.KeysLimit(opts)
	readable := func(k string) bool { return allowed(cfg.Read, k) }
	keys, complete, err := b.r.svc.pats.Scan(ctx, pattern, limit, readable)
	if err != nil {
		return nil, status.StoreError(err)
	}
	if !complete {
		return nil, status.KeysOverLimit(pattern, limit)
	}
	return keys, nil
}

// WatchPattern implements abi.Host. The keys the pattern matches now are
// counted first: more than the rule's max_watched_keys fails with LIMIT
// (offline, the count waits for the first scan). The watch is staged while
// the version starts, as Watch's are; the pattern's scans (patternwatch.Hub)
// then register its keys and give them to the rule. The guard has checked
// the pattern.
func (b *binding) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	cfg := b.r.config()
	pat, err := patterns.Compile(pattern)
	if err != nil { // the guard compiled it: it compiles
		return abi.Errorf(abi.StatusInvalid, "watch_pattern %.200q: %v", pattern, err)
	}
	_, complete, err := b.r.svc.pats.Scan(ctx, pattern, cfg.MaxWatchedKeys, func(k string) bool { return patternReadable(cfg, k) })
	switch {
	case errors.Is(err, protocol.ErrNotConnected):
	case err != nil:
		return status.StoreError(err)
	case !complete:
		return abi.Errorf(abi.StatusLimit, "watch_pattern %q: more than max_watched_keys (%d) keys match (rule %s; raise max_watched_keys in ssrun.yaml or narrow the pattern)", pattern, cfg.MaxWatchedKeys, b.r.name)
	}
	lp := patternwatch.Watch{Pat: pat, Opts: opts}
	in := b.in
	in.mu.Lock()
	if !in.live { // swap applies it, as a watch
		b.r.pats.Stage(in, lp)
		in.mu.Unlock()
		return nil
	}
	in.mu.Unlock()
	return b.r.pats.Add(ctx, lp)
}

// UnwatchPattern implements abi.Host.
func (b *binding) UnwatchPattern(ctx context.Context, pattern string) error {
	in := b.in
	in.mu.Lock()
	if !in.live {
		ok := b.r.pats.Unstage(in, pattern)
		in.mu.Unlock()
		if !ok {
			return abi.Errorf(abi.StatusNotFound, "unwatch_pattern %q: not watched", pattern)
		}
		return nil
	}
	in.mu.Unlock()
	if !b.r.pats.Drop(ctx, pattern) {
		return abi.Errorf(abi.StatusNotFound, "unwatch_pattern %q: not watched", pattern)
	}
	return nil
}

// Replaced implements patternwatch.Version.
func (in *instance) Replaced() bool { return in.closed.Load() }
