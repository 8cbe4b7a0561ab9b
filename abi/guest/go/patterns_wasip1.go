//go:build wasip1

package ssrun

import (
	"unsafe"

	"github.com/ssrun/ssrun/abi"
)

// Revision 3. The linker keeps an import only if the rule calls it, so a
// rule that lists or watches no pattern still loads on an older host.

//go:noescape
//go:wasmimport ssrun keys
func hostKeys(patternPtr unsafe.Pointer, patternLen uint32, limit int64, outPtr unsafe.Pointer, outCap uint32, outLenPtr unsafe.Pointer) int32

//go:noescape
//go:wasmimport ssrun watch_pattern
func hostWatchPattern(patternPtr unsafe.Pointer, patternLen uint32, flags int32) int32

//go:noescape
//go:wasmimport ssrun unwatch_pattern
func hostUnwatchPattern(patternPtr unsafe.Pointer, patternLen uint32) int32

// keys has the host write the record (abi.AppendKeys) into the shared
// buffer, or fetches a longer one with `result`, and decodes it: the keys
// are strings of their own.
func keys(pattern string, opts []KeysOptions) ([]string, error) {
	var o KeysOptions
	if len(opts) != 0 {
		var err error
		if o, err = one(abi.FnKeys, pattern, opts); err != nil {
			return nil, err
		}
	}
	enter()
	st := Status(hostKeys(strPtr(pattern), uint32(len(pattern)), int64(o.Limit), outPtr(), outCap, lenPtr()))
	rec := record()
	if st == abi.StatusBufferTooSmall {
		rec, st = fetch()
	}
	if st != abi.StatusOK {
		return nil, failed(abi.FnKeys, pattern, st)
	}
	list, err := abi.DecodeKeys(rec)
	leave()
	if err != nil {
		return nil, badRecord(abi.FnKeys, pattern, err)
	}
	return list, nil
}

func watchPattern(pattern string, opts []WatchOptions) error {
	var flags int32
	if len(opts) != 0 {
		o, err := one(abi.FnWatchPattern, pattern, opts)
		if err != nil {
			return err
		}
		if o.Self {
			flags |= 1
		}
	}
	enter()
	if st := hostWatchPattern(strPtr(pattern), uint32(len(pattern)), flags); st != 0 {
		return failed(abi.FnWatchPattern, pattern, Status(st))
	}
	leave()
	return nil
}

func unwatchPattern(pattern string) error {
	enter()
	if st := hostUnwatchPattern(strPtr(pattern), uint32(len(pattern))); st != 0 {
		if e := again(abi.FnUnwatchPattern, pattern, st); e != nil {
			return e
		}
		return failed(abi.FnUnwatchPattern, pattern, Status(st))
	}
	leave()
	return nil
}
