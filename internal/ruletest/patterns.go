package ruletest

import (
	"context"
	"fmt"

	"github.com/ssrun/ssrun/abi"
)

// dispatchPattern runs the commands of the revision 3 verbs (see
// Dispatch), reporting as Dispatch does; false when cmd is not one:
//
//	keys <pattern> <limit>                 n, keys
//	watch_pattern <pattern> <"self" or "">
//	unwatch_pattern <pattern>
func dispatchPattern(ctx context.Context, h abi.Host, cmd string, a []string) bool {
	switch cmd {
	case abi.FnKeys:
		keys, err := h.Keys(ctx, a[0], abi.KeysOptions{Limit: Number(a[1])})
		Report(h, abi.FnKeys, err, "n", len(keys), "keys", fmt.Sprintf("%q", keys))
	case abi.FnWatchPattern:
		Report(h, abi.FnWatchPattern, h.WatchPattern(ctx, a[0], abi.WatchOptions{Self: a[1] == "self"}))
	case abi.FnUnwatchPattern:
		Report(h, abi.FnUnwatchPattern, h.UnwatchPattern(ctx, a[0]))
	default:
		return false
	}
	return true
}
