package wasm

import (
	"context"

	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
)

// The host functions of ABI revision 3 (abi/doc.go): keys, watch_pattern
// and unwatch_pattern. A module built for revisions 1 or 2 imports none of
// them and loads as before; hostFuncs lists them after revision 2's.

// hostKeys lists the keys matching a pattern: the result record is
// abi.AppendKeys's (a count, then the keys as fields), through the out
// buffer or, when it is larger, `result`. The limit is an i64 so that no
// value a guest passes is cut to a smaller one; a limit outside 0 to
// abi.MaxKeysLimit is INVALID here, before the Host is asked. The pattern
// is the Host's to judge (INVALID, DENIED).
func hostKeys(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	pattern := c.key(mem, abi.FnKeys, "pattern", s[0], s[1])
	o := mem.out(abi.FnKeys, s[3], s[4], s[5])
	opts, err := keysOptions(pattern, int64(s[2]))
	var keys []string
	if err == nil {
		keys, err = c.host.Keys(ctx, pattern, opts)
	}
	if err != nil {
		return c.reply(err, c.recBuf(), false, o)
	}
	rec := c.recBuf()
	if need := abi.KeysSize(keys); cap(rec) < need {
		rec = make([]byte, 0, need)
	}
	return c.reply(nil, abi.AppendKeys(rec, keys), true, o)
}

// keysOptions decodes keys' limit.
func keysOptions(pattern string, limit int64) (abi.KeysOptions, error) {
	if limit < 0 || limit > abi.MaxKeysLimit {
		return abi.KeysOptions{}, abi.Errorf(abi.StatusInvalid, "keys %q: limit %d out of range (0 for the default of %d, at most %d)",
			pattern, limit, abi.DefaultKeysLimit, abi.MaxKeysLimit)
	}
	return abi.KeysOptions{Limit: int(limit)}, nil
}

func hostWatchPattern(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	pattern := c.key(mem, abi.FnWatchPattern, "pattern", s[0], s[1])
	opts, err := watchOptions(abi.FnWatchPattern, pattern, api.DecodeI32(s[2]))
	if err == nil {
		err = c.host.WatchPattern(ctx, pattern, opts)
	}
	return c.status(err)
}

func hostUnwatchPattern(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	return c.status(c.host.UnwatchPattern(ctx, c.key(mem, abi.FnUnwatchPattern, "pattern", s[0], s[1])))
}

// maxKeptRecord is the largest result record buffer an instance keeps for
// the next verb's record: a larger one (a long list of keys, a large
// value) is dropped with its record, so an instance does not hold it for
// life (a list of 100,000 keys is several MiB). A rule that gets a value
// this large on every event allocates its record each time instead.
const maxKeptRecord = 1 << 20

// recBuf returns an empty buffer for a verb's result record: the last
// record's, unless that is larger than maxKeptRecord.
func (c *caller) recBuf() []byte {
	if cap(c.rec) > maxKeptRecord {
		return nil
	}
	return c.rec[:0]
}
