package testrun

import (
	"context"

	"github.com/ssrun/ssrun/abi"
)

// The pattern verbs of ABI revision 3 are not replayed on this branch
// (s10-guests, the runtimes' side; testrun's are on s10-patterns): without
// these stubs *tape would not be an abi.Host and testrun would not build.
// They refuse every call. Delete this file when the two branches are
// merged.

// Keys implements abi.Host: not in this branch.
func (t *tape) Keys(_ context.Context, pattern string, _ abi.KeysOptions) ([]string, error) {
	return nil, abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", abi.FnKeys, pattern)
}

// WatchPattern implements abi.Host: not in this branch.
func (t *tape) WatchPattern(_ context.Context, pattern string, _ abi.WatchOptions) error {
	return abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", abi.FnWatchPattern, pattern)
}

// UnwatchPattern implements abi.Host: not in this branch.
func (t *tape) UnwatchPattern(_ context.Context, pattern string) error {
	return abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", abi.FnUnwatchPattern, pattern)
}
