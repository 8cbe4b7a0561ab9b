package abitest

import (
	"context"

	"github.com/ssrun/ssrun/abi"
)

// The pattern verbs of ABI revision 3 are not in this package on this
// branch (s10-guests, the runtimes' side; abitest's own are on
// s10-patterns): without these stubs *Host would not be an abi.Host, and
// nothing that tests against it would build. They refuse every call.
// Delete this file when the two branches are merged.

// Keys implements abi.Host: not in this branch.
func (h *Host) Keys(_ context.Context, pattern string, _ abi.KeysOptions) ([]string, error) {
	return nil, abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", abi.FnKeys, pattern)
}

// WatchPattern implements abi.Host: not in this branch.
func (h *Host) WatchPattern(_ context.Context, pattern string, _ abi.WatchOptions) error {
	return abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", abi.FnWatchPattern, pattern)
}

// UnwatchPattern implements abi.Host: not in this branch.
func (h *Host) UnwatchPattern(_ context.Context, pattern string) error {
	return abi.Errorf(abi.StatusInvalid, "%s %q: pattern watches are not in this branch", abi.FnUnwatchPattern, pattern)
}
