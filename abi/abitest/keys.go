package abitest

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/glob"
	"github.com/ssrun/ssrun/protocol/resp"
)

// reserved is the host's reserved prefix: keys under it are never listed
// or watched through a pattern (host.ReservedPrefix; abitest may not
// import host).
const reserved = "$ssrun/"

// DefaultMaxWatchedKeys is a Host's bound on the keys its pattern watches
// cover when Host.MaxWatchedKeys is zero (the host's default).
const DefaultMaxWatchedKeys = 10_000

var bScan = []byte("SCAN")

// checkPattern refuses a pattern that is malformed (INVALID) or reserved
// (DENIED), for verb.
func checkPattern(verb, pattern string) error {
	if pattern == "" {
		return abi.Errorf(abi.StatusInvalid, "%s: empty pattern", verb)
	}
	g, err := glob.Compile(pattern, nil)
	if err != nil {
		return abi.Errorf(abi.StatusInvalid, "%s %q: %v", verb, pattern, err)
	}
	if strings.HasPrefix(g.Prefix(), reserved) {
		return abi.Errorf(abi.StatusDenied, "%s %q: keys under %s are reserved for the host", verb, pattern, reserved)
	}
	return nil
}

// Scan returns the keys matching pattern, sorted, that keep returns true
// for (nil: all) and that are not under the reserved prefix, paging through
// the store with SCAN as a client would. It stops with StatusLimit once
// more than limit keys are found.
func (s *Store) Scan(pattern string, limit int, keep func(key string) bool) ([]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	var token []byte
	for {
		args := [][]byte{bScan, []byte(pattern)}
		if token != nil {
			args = append(args, token)
		}
		rep, _, err := s.exec(nil, "", args...)
		if err != nil {
			return nil, err
		}
		if rep.Kind != resp.KindArray {
			return nil, refused("keys", pattern, rep)
		}
		keys, next, more, err := resp.ParseScanReply(rep.Str)
		if err != nil {
			return nil, abi.Errorf(abi.StatusInternal, "keys %q: the store's reply: %v", pattern, err)
		}
		for _, k := range keys {
			key := string(k)
			if strings.HasPrefix(key, reserved) || (keep != nil && !keep(key)) {
				continue
			}
			if len(out) == limit {
				return nil, abi.Errorf(abi.StatusLimit, "keys %q: more than %d keys match", pattern, limit)
			}
			out = append(out, key)
		}
		if !more {
			break
		}
		token = slices.Clone(next)
	}
	slices.Sort(out) // the store's order already; a cheap guarantee
	return out, nil
}

// Keys implements abi.Host: the store's keys matching pattern (Store.Scan),
// without those Deny refuses for "get".
func (h *Host) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnKeys, Call{Key: pattern, Keys: opts}); err != nil {
		return nil, err
	}
	limit := opts.Limit
	if limit == 0 {
		limit = abi.DefaultKeysLimit
	}
	if limit < 0 || limit > abi.MaxKeysLimit {
		return nil, abi.Errorf(abi.StatusInvalid, "keys %q: limit %d is not between 0 and %d", pattern, opts.Limit, abi.MaxKeysLimit)
	}
	if err := checkPattern("keys", pattern); err != nil {
		return nil, err
	}
	return h.st.Scan(pattern, limit, h.readable)
}

// readable reports whether Deny lets the rule read key. h.mu is held.
func (h *Host) readable(key string) bool { return h.Deny == nil || !h.Deny(abi.FnGet, key) }

// WatchPattern implements abi.Host: it records the pattern (Patterns)
// after checking it and the keys it covers now against MaxWatchedKeys
// (StatusLimit past it). Nothing is delivered by itself: a test delivers
// the events it wants.
func (h *Host) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnWatchPattern, Call{Key: pattern, Watch: opts}); err != nil {
		return err
	}
	if err := checkPattern("watch_pattern", pattern); err != nil {
		return err
	}
	max := h.MaxWatchedKeys
	if max <= 0 {
		max = DefaultMaxWatchedKeys
	}
	if _, err := h.st.Scan(pattern, max, h.readable); err != nil {
		if abi.StatusOf(err) == abi.StatusLimit {
			return abi.Errorf(abi.StatusLimit, "watch_pattern %q: more than max_watched_keys (%d) keys match", pattern, max)
		}
		return err
	}
	h.patterns[pattern] = opts
	return nil
}

// UnwatchPattern implements abi.Host.
func (h *Host) UnwatchPattern(ctx context.Context, pattern string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.begin(ctx, abi.FnUnwatchPattern, Call{Key: pattern}); err != nil {
		return err
	}
	if _, ok := h.patterns[pattern]; !ok {
		return abi.Errorf(abi.StatusNotFound, "unwatch_pattern %q: not watched", pattern)
	}
	delete(h.patterns, pattern)
	return nil
}

// Patterns returns the watched patterns and their options.
func (h *Host) Patterns() map[string]abi.WatchOptions {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.patterns)
}
