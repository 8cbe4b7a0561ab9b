package host

import (
	"context"

	"github.com/ssrun/ssrun/abi"
)

// The pattern verbs of a rule that ssrun check starts (check.go): a
// pattern is refused as the binding refuses it (malformed, outside the
// rule's permissions), then the in-memory store answers.

// Keys implements abi.Host.
func (s *checkStore) Keys(ctx context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	if _, err := compilePattern("keys", pattern, s.rule, s.cfg.Read); err != nil {
		return nil, err
	}
	return s.Host.Keys(ctx, pattern, opts)
}

// WatchPattern implements abi.Host.
func (s *checkStore) WatchPattern(ctx context.Context, pattern string, opts abi.WatchOptions) error {
	if _, err := compilePattern("watch_pattern", pattern, s.rule, s.cfg.Read, s.cfg.Watch); err != nil {
		return err
	}
	return s.Host.WatchPattern(ctx, pattern, opts)
}
