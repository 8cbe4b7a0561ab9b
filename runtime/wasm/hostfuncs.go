package wasm

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
)

const (
	i32 = api.ValueTypeI32
	i64 = api.ValueTypeI64
)

// hostFunc is one function of the "ssrun" host module.
type hostFunc struct {
	name   string
	params []api.ValueType
	names  []string
	call   func(ctx context.Context, c *caller, mem guestMem, stack []uint64) abi.Status
}

// hostFuncs is ABI v1 (revision 3) as the guest sees it (abi/doc.go), in
// the order of abi.HostFunctions(). Every function returns one i32 status.
// The import check in Compile uses the same table.
var hostFuncs = []hostFunc{
	{abi.FnGet, []api.ValueType{i32, i32, i32, i32, i32},
		[]string{"key_ptr", "key_len", "out_ptr", "out_cap", "out_len_ptr"}, hostGet},
	{abi.FnSet, []api.ValueType{i32, i32, i32, i32, i32, i64, i32, i32, i32, i32, i32},
		[]string{"key_ptr", "key_len", "val_ptr", "val_len", "cond", "ttl_ms", "fence_ptr", "fence_len", "out_ptr", "out_cap", "out_len_ptr"}, hostSet},
	{abi.FnDel, []api.ValueType{i32, i32, i32, i32},
		[]string{"key_ptr", "key_len", "fence_ptr", "fence_len"}, hostDel},
	{abi.FnVDel, []api.ValueType{i32, i32, i32, i32, i32, i32},
		[]string{"key_ptr", "key_len", "val_ptr", "val_len", "fence_ptr", "fence_len"}, hostVDel},
	{abi.FnWatch, []api.ValueType{i32, i32, i32},
		[]string{"key_ptr", "key_len", "flags"}, hostWatch},
	{abi.FnUnwatch, []api.ValueType{i32, i32},
		[]string{"key_ptr", "key_len"}, hostUnwatch},
	{abi.FnLock, []api.ValueType{i32, i32, i64, i64, i32, i32, i32},
		[]string{"name_ptr", "name_len", "ttl_ms", "wait_ms", "out_ptr", "out_cap", "out_len_ptr"}, hostLock},
	{abi.FnUnlock, []api.ValueType{i32, i32},
		[]string{"name_ptr", "name_len"}, hostUnlock},
	{abi.FnLog, []api.ValueType{i32, i32, i32},
		[]string{"level", "msg_ptr", "msg_len"}, hostLog},
	{abi.FnResult, []api.ValueType{i32, i32, i32},
		[]string{"out_ptr", "out_cap", "out_len_ptr"}, hostResult},
	{abi.FnLastError, []api.ValueType{i32, i32, i32},
		[]string{"out_ptr", "out_cap", "out_len_ptr"}, hostLastError},
	// Revision 2 (timerfuncs.go).
	{abi.FnTimer, []api.ValueType{i32, i32, i64, i64, i32, i32},
		[]string{"name_ptr", "name_len", "delay_ms", "every_ms", "payload_ptr", "payload_len"}, hostTimer},
	{abi.FnCancel, []api.ValueType{i32, i32},
		[]string{"name_ptr", "name_len"}, hostCancel},
	{abi.FnNow, []api.ValueType{i32},
		[]string{"out_ptr"}, hostNow},
	// Revision 3 (patternfuncs.go).
	{abi.FnKeys, []api.ValueType{i32, i32, i64, i32, i32, i32},
		[]string{"pattern_ptr", "pattern_len", "limit", "out_ptr", "out_cap", "out_len_ptr"}, hostKeys},
	{abi.FnWatchPattern, []api.ValueType{i32, i32, i32},
		[]string{"pattern_ptr", "pattern_len", "flags"}, hostWatchPattern},
	{abi.FnUnwatchPattern, []api.ValueType{i32, i32},
		[]string{"pattern_ptr", "pattern_len"}, hostUnwatchPattern},
}

// caller is the per-instance state the host functions work on: the rule's
// Host and what `result` and `last_error` return. Only the goroutine
// running the instance touches it.
type caller struct {
	host abi.Host
	// rec is the last verb's result record, kept for `result` when hasRec;
	// recStatus is that verb's real status.
	rec       []byte
	recStatus abi.Status
	hasRec    bool
	// lastErr is the last call that failed, for `last_error`.
	lastErr lastError
	// keys are the strings of the keys and names last named (keys.go).
	keys keyCache
}

// instantiateHostModule adds the "ssrun" module to rt. Each function finds
// its caller's state through callers (keyed by the calling module).
func instantiateHostModule(ctx context.Context, rt wazero.Runtime, callers func(api.Module) *caller) error {
	b := rt.NewHostModuleBuilder(abi.ImportModule)
	for _, f := range hostFuncs {
		call := f.call
		b.NewFunctionBuilder().
			WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, mod api.Module, stack []uint64) {
				stack[0] = api.EncodeI32(int32(call(ctx, callers(mod), memoryOf(mod), stack)))
			}), f.params, []api.ValueType{i32}).
			WithParameterNames(f.names...).
			WithResultNames("status").
			Export(f.name)
	}
	_, err := b.Instantiate(ctx)
	return err
}

// misuseError is an argument range outside guest memory: ABI misuse. The
// host function panics with it, which wazero turns into a trap of the
// guest's call.
type misuseError struct {
	fn, arg  string
	ptr, n   uint32
	memBytes uint64
}

func (e *misuseError) Error() string {
	return fmt.Sprintf("ssrun.%s: %s [%d, %d+%d) is outside guest memory (%d bytes)", e.fn, e.arg, e.ptr, e.ptr, e.n, e.memBytes)
}

// guestMem is the calling instance's linear memory during one host call
// (all of it, aliased: nil for a module without memory). It stays valid
// for the call, since the guest cannot grow its memory meanwhile; taken
// once per call, it spares each argument two calls through api.Memory.
type guestMem []byte

// memoryOf returns mod's memory as a guestMem.
func memoryOf(mod api.Module) guestMem {
	m := mod.Memory()
	if m == nil {
		return nil
	}
	b, _ := m.Read(0, m.Size())
	return b
}

// view returns guest memory [ptr, ptr+n), trapping the call if it is out of
// range. The view aliases memory (its capacity ends with it, so an append
// copies).
func (m guestMem) view(fn, arg string, ptr, n uint64) []byte {
	p, l := api.DecodeU32(ptr), api.DecodeU32(n)
	end := uint64(p) + uint64(l)
	if end > uint64(len(m)) {
		panic(&misuseError{fn: fn, arg: arg, ptr: p, n: l, memBytes: uint64(len(m))})
	}
	return m[p:end:end]
}

// str copies a guest string argument.
func (m guestMem) str(fn, arg string, ptr, n uint64) string {
	return string(m.view(fn, arg, ptr, n))
}

// lent is a guest byte argument the Host only borrows for the call (set's
// and vdel's value, timer's payload: abi.Host), a view of guest memory.
func (m guestMem) lent(fn, arg string, ptr, n uint64) []byte {
	return m.view(fn, arg, ptr, n)
}

// outBuf is a verb's result destination, checked before the verb runs so
// that misuse traps before any store operation.
type outBuf struct {
	buf   []byte
	lenAt []byte // the 4 bytes of out_len
}

func (m guestMem) out(fn string, ptr, capacity, lenPtr uint64) outBuf {
	buf := m.view(fn, "out buffer", ptr, capacity)
	return outBuf{buf: buf, lenAt: m.view(fn, "out_len", lenPtr, 4)}
}

// deliver writes rec's length at o's out_len and rec into its buffer if it
// fits (else BUFFER_TOO_SMALL), returning st when it does. rec is a record
// or a message, copied as it is.
func deliver[T []byte | string](o outBuf, rec T, st abi.Status) abi.Status {
	binary.LittleEndian.PutUint32(o.lenAt, uint32(len(rec)))
	if len(rec) > len(o.buf) {
		return abi.StatusBufferTooSmall
	}
	copy(o.buf, rec)
	return st
}

// reply records a verb's outcome (last error, kept record) and returns the
// status the guest sees. rec is kept when hasRec; o receives it. A failure
// is kept as its error: its message is made only if the guest asks.
func (c *caller) reply(err error, rec []byte, hasRec bool, o outBuf) abi.Status {
	st := abi.StatusOf(err)
	if err != nil {
		c.lastErr.set(err)
	}
	c.rec, c.recStatus, c.hasRec = rec, st, hasRec
	if !hasRec {
		return st
	}
	return deliver(o, rec, st)
}

// status is reply for verbs without results.
func (c *caller) status(err error) abi.Status { return c.reply(err, c.recBuf(), false, outBuf{}) }

func hostGet(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	key := c.key(mem, abi.FnGet, "key", s[0], s[1])
	o := mem.out(abi.FnGet, s[2], s[3], s[4])
	v, err := c.host.Get(ctx, key)
	rec := c.recBuf()
	if err == nil {
		rec = abi.AppendField(abi.AppendField(rec, v.Data), []byte(v.Version))
	}
	return c.reply(err, rec, err == nil, o)
}

func hostSet(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	key := c.key(mem, abi.FnSet, "key", s[0], s[1])
	val := mem.lent(abi.FnSet, "value", s[2], s[3])
	fence := mem.str(abi.FnSet, "fence", s[6], s[7])
	o := mem.out(abi.FnSet, s[8], s[9], s[10])
	opts, err := setOptions(key, api.DecodeI32(s[4]), int64(s[5]), fence)
	var version string
	if err == nil {
		version, err = c.host.Set(ctx, key, val, opts)
	}
	st := abi.StatusOf(err)
	hasRec := st == abi.StatusOK || st == abi.StatusNotApplied
	return c.reply(err, abi.AppendField(c.recBuf(), []byte(version)), hasRec, o)
}

func hostDel(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	key := c.key(mem, abi.FnDel, "key", s[0], s[1])
	fence := mem.str(abi.FnDel, "fence", s[2], s[3])
	return c.status(c.host.Del(ctx, key, abi.DelOptions{Fence: fence}))
}

func hostVDel(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	key := c.key(mem, abi.FnVDel, "key", s[0], s[1])
	val := mem.lent(abi.FnVDel, "value", s[2], s[3])
	fence := mem.str(abi.FnVDel, "fence", s[4], s[5])
	return c.status(c.host.VDel(ctx, key, val, abi.DelOptions{Fence: fence}))
}

func hostWatch(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	key := c.key(mem, abi.FnWatch, "key", s[0], s[1])
	opts, err := watchOptions(abi.FnWatch, key, api.DecodeI32(s[2]))
	if err == nil {
		err = c.host.Watch(ctx, key, opts)
	}
	return c.status(err)
}

func hostUnwatch(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	return c.status(c.host.Unwatch(ctx, c.key(mem, abi.FnUnwatch, "key", s[0], s[1])))
}

func hostLock(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	name := c.key(mem, abi.FnLock, "name", s[0], s[1])
	o := mem.out(abi.FnLock, s[4], s[5], s[6])
	ttl, opts, err := lockArgs(name, int64(s[2]), int64(s[3]))
	var token string
	if err == nil {
		token, err = c.host.Lock(ctx, name, ttl, opts)
	}
	return c.reply(err, abi.AppendField(c.recBuf(), []byte(token)), err == nil, o)
}

func hostUnlock(ctx context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	return c.status(c.host.Unlock(ctx, c.key(mem, abi.FnUnlock, "name", s[0], s[1])))
}

func hostLog(_ context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	msg := mem.str(abi.FnLog, "message", s[1], s[2])
	c.host.Log(api.DecodeI32(s[0]), msg)
	return c.status(nil)
}

// hostResult copies the record kept from the last verb. It leaves the
// record and the last error in place, so it can be called again.
func hostResult(_ context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	o := mem.out(abi.FnResult, s[0], s[1], s[2])
	if !c.hasRec {
		c.lastErr.set(errNoRecord)
		return abi.StatusInvalid
	}
	return deliver(o, c.rec, c.recStatus)
}

// hostLastError copies the message of the last failed call, built on the
// first ask (lastError); it changes nothing the guest sees, so it can be
// called again with a larger buffer.
func hostLastError(_ context.Context, c *caller, mem guestMem, s []uint64) abi.Status {
	o := mem.out(abi.FnLastError, s[0], s[1], s[2])
	return deliver(o, c.lastErr.message(), abi.StatusOK)
}

// maxMillis is the largest millisecond count a time.Duration holds.
const maxMillis = math.MaxInt64 / int64(time.Millisecond)

// millis converts a guest duration in milliseconds.
func millis(ms int64) (time.Duration, bool) {
	if ms < 0 || ms > maxMillis {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// setOptions decodes set's option arguments.
func setOptions(key string, cond int32, ttlMs int64, fence string) (abi.SetOptions, error) {
	if cond < int32(abi.CondNone) || cond > int32(abi.CondNEX) {
		return abi.SetOptions{}, abi.Errorf(abi.StatusInvalid, "set %q: unknown condition %d (want 0 none, 1 NX, 2 NEX)", key, cond)
	}
	ttl, ok := millis(ttlMs)
	if !ok {
		return abi.SetOptions{}, abi.Errorf(abi.StatusInvalid, "set %q: ttl %d ms out of range", key, ttlMs)
	}
	return abi.SetOptions{Cond: abi.Condition(cond), TTL: ttl, Fence: fence}, nil
}

// watchFlagSelf is watch's flags bit 0.
const watchFlagSelf = 1

// watchOptions decodes the flags of verb (watch, watch_pattern).
func watchOptions(verb, key string, flags int32) (abi.WatchOptions, error) {
	if flags&^watchFlagSelf != 0 {
		return abi.WatchOptions{}, abi.Errorf(abi.StatusInvalid, "%s %q: unknown flags %#x", verb, key, uint32(flags))
	}
	return abi.WatchOptions{Self: flags&watchFlagSelf != 0}, nil
}

// lockArgs decodes lock's durations.
func lockArgs(name string, ttlMs, waitMs int64) (time.Duration, abi.LockOptions, error) {
	ttl, ok := millis(ttlMs)
	if !ok {
		return 0, abi.LockOptions{}, abi.Errorf(abi.StatusInvalid, "lock %q: ttl %d ms out of range", name, ttlMs)
	}
	wait, ok := millis(waitMs)
	if !ok {
		return 0, abi.LockOptions{}, abi.Errorf(abi.StatusInvalid, "lock %q: wait %d ms out of range", name, waitMs)
	}
	return ttl, abi.LockOptions{Wait: wait}, nil
}
