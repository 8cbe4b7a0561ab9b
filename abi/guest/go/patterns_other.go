//go:build !wasip1

package ssrun

import "github.com/ssrun/ssrun/abi"

// Outside a WebAssembly rule the revision 3 verbs fail like the others.

func keys(pattern string, opts []KeysOptions) ([]string, error) {
	if _, err := one(abi.FnKeys, pattern, opts); err != nil {
		return nil, err
	}
	return nil, notWasm(abi.FnKeys, pattern)
}

func watchPattern(pattern string, opts []WatchOptions) error {
	if _, err := one(abi.FnWatchPattern, pattern, opts); err != nil {
		return err
	}
	return notWasm(abi.FnWatchPattern, pattern)
}

func unwatchPattern(pattern string) error { return notWasm(abi.FnUnwatchPattern, pattern) }
