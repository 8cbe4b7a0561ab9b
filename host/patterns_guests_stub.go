package host

import (
	"context"

	"github.com/ssrun/ssrun/abi"
)

// The pattern verbs of ABI revision 3 are not served on this branch
// (s10-guests, the runtimes' side): the host's side is on s10-patterns.
// Delete this file when the two branches are merged.

func errNoPatterns(verb, pattern string) error {
	return abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", verb, pattern)
}

// Keys implements abi.Host: not in this branch.
func (b *binding) Keys(_ context.Context, pattern string, _ abi.KeysOptions) ([]string, error) {
	return nil, errNoPatterns(abi.FnKeys, pattern)
}

// WatchPattern implements abi.Host: not in this branch.
func (b *binding) WatchPattern(_ context.Context, pattern string, _ abi.WatchOptions) error {
	return errNoPatterns(abi.FnWatchPattern, pattern)
}

// UnwatchPattern implements abi.Host: not in this branch.
func (b *binding) UnwatchPattern(_ context.Context, pattern string) error {
	return errNoPatterns(abi.FnUnwatchPattern, pattern)
}

// Keys implements abi.Host: not in this branch.
func (h recorded) Keys(_ context.Context, pattern string, _ abi.KeysOptions) ([]string, error) {
	return nil, errNoPatterns(abi.FnKeys, pattern)
}

// WatchPattern implements abi.Host: not in this branch.
func (h recorded) WatchPattern(_ context.Context, pattern string, _ abi.WatchOptions) error {
	return errNoPatterns(abi.FnWatchPattern, pattern)
}

// UnwatchPattern implements abi.Host: not in this branch.
func (h recorded) UnwatchPattern(_ context.Context, pattern string) error {
	return errNoPatterns(abi.FnUnwatchPattern, pattern)
}
