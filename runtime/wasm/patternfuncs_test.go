package wasm

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// TestPatternVerbs: keys, watch_pattern and unwatch_pattern from the Go
// SDK through the host module to abi.Host: results (binary keys), options,
// the host's refusals (INVALID, DENIED, LIMIT) and every status with its
// message.
func TestPatternVerbs(t *testing.T) {
	p := compile(t, sharedRuntime(t), "rule.wasm", guest(t, "rule"))
	ruletest.RunPatternCases(t, ruletest.PatternCases(), func(t *testing.T) (abi.Script, *ruletest.PatternHost) {
		h := ruletest.NewPatternHost(ruletest.PatternKeys...)
		return start(t, p, h, abi.Limits{}), h
	})
}

// TestKeysThroughResult: a list longer than the Go SDK's 16 KiB buffer
// comes through `result`, whole, without asking the Host again.
func TestKeysThroughResult(t *testing.T) {
	var keys []string
	for i := range 2000 {
		keys = append(keys, fmt.Sprintf("fleet/%05d/setPoint", i))
	}
	h := ruletest.NewPatternHost(keys...)
	s := start(t, compile(t, sharedRuntime(t), "rule.wasm", guest(t, "rule")), h, abi.Limits{})
	got := run(t, s, h.Host, command("keys", "fleet/*", "2000"))
	want := fmt.Sprintf(`keys status=OK msg="" n=2000 keys=%q`, keys)
	if got != want {
		t.Fatalf("report %.200s..., want %.200s...", got, want)
	}
	if n := h.Calls(abi.FnKeys); n != 1 {
		t.Fatalf("host keys called %d times, want 1", n)
	}
}

// handPatterns is the hand-made guest bound to a PatternHost over keys.
func handPatterns(t *testing.T, keys ...string) (*handABI, *ruletest.PatternHost) {
	t.Helper()
	h := ruletest.NewPatternHost(keys...)
	s := start(t, compile(t, sharedRuntime(t), "hand.wasm", handGuest(nil).bytes()), h, abi.Limits{})
	return &handABI{t: t, s: s, h: h.Host}, h
}

// TestKeysRecord follows abi/doc.go for keys: the record (a count, then the
// keys as fields) in the out buffer, out_len, BUFFER_TOO_SMALL and
// `result` with the real status, and a failure writing no record.
func TestKeysRecord(t *testing.T) {
	c, h := handPatterns(t, "a/1", "a/2\x00", "b/1")
	c.write(atKey, []byte("a/*"))
	want := abi.AppendKeys(nil, []string{"a/1", "a/2\x00"})

	c.fill()
	c.expect("keys", c.call(abi.FnKeys, atKey, 3, i64arg(0), atOut, 0x1000, atOutLen), abi.StatusOK)
	if got := c.read(atOut, c.outLen()); string(got) != string(want) {
		t.Fatalf("record %x, want %x", got, want)
	}

	c.fill()
	c.expect("keys small", c.call(abi.FnKeys, atKey, 3, i64arg(0), atOut, 5, atOutLen), abi.StatusBufferTooSmall)
	if c.outLen() != uint32(len(want)) {
		t.Fatalf("out_len %d, want %d", c.outLen(), len(want))
	}
	if got := c.read(atOut, 5); string(got) != "\xaa\xaa\xaa\xaa\xaa" {
		t.Fatalf("the small buffer was written: %x", got)
	}
	c.expect("result", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusOK)
	if got := c.read(atOut2, c.outLen()); string(got) != string(want) {
		t.Fatalf("result %x, want %x", got, want)
	}
	if n := h.Calls(abi.FnKeys); n != 2 {
		t.Fatalf("host keys called %d times, want 2 (result does not repeat it)", n)
	}

	// LIMIT keeps no record: result has none; the message names the bound.
	c.fill()
	c.expect("keys limit", c.call(abi.FnKeys, atKey, 3, i64arg(1), atOut, 0x1000, atOutLen), abi.StatusLimit)
	if c.outLen() != 0xdeadbeef {
		t.Fatalf("a failure wrote out_len %d", c.outLen())
	}
	if got := c.lastError(); got != `keys "a/*": more than 1 keys match` {
		t.Fatalf("last_error %q", got)
	}
	c.expect("result after failure", c.call(abi.FnResult, atOut2, 0x1000, atOutLen), abi.StatusInvalid)
}

// TestPatternArguments: a limit out of range (including values an i32
// would cut into range) and unknown watch flags are INVALID, named in the
// message, before the Host is asked; the largest limit goes through.
func TestPatternArguments(t *testing.T) {
	c, h := handPatterns(t, "a/1")
	c.write(atKey, []byte("a/*"))
	for _, limit := range []int64{-1, abi.MaxKeysLimit + 1, 1<<32 + 5, math.MinInt64, math.MaxInt64} {
		c.expect(fmt.Sprint("limit ", limit), c.call(abi.FnKeys, atKey, 3, i64arg(limit), atOut, 0x1000, atOutLen), abi.StatusInvalid)
		want := fmt.Sprintf(`keys "a/*": limit %d out of range (0 for the default of 1000, at most 100000)`, limit)
		if got := c.lastError(); got != want {
			t.Fatalf("last_error %q, want %q", got, want)
		}
	}
	c.expect("flags", c.call(abi.FnWatchPattern, atKey, 3, 6), abi.StatusInvalid)
	if got := c.lastError(); got != `watch_pattern "a/*": unknown flags 0x6` {
		t.Fatalf("last_error %q", got)
	}
	if n := h.Calls(abi.FnKeys) + h.Calls(abi.FnWatchPattern); n != 0 {
		t.Fatalf("the Host was asked %d times", n)
	}
	c.expect("max limit", c.call(abi.FnKeys, atKey, 3, i64arg(abi.MaxKeysLimit), atOut, 0x1000, atOutLen), abi.StatusOK)
	c.expect("self", c.call(abi.FnWatchPattern, atKey, 3, 1), abi.StatusOK)
	if n, c := h.Called(abi.FnKeys); n != 1 || c.Keys.Limit != abi.MaxKeysLimit {
		t.Fatalf("%d keys calls, the last %+v, want one with limit %d", n, c, abi.MaxKeysLimit)
	}
	if got := h.Patterns(); !got["a/*"].Self || len(got) != 1 {
		t.Fatalf("patterns %v, want a/* with self", got)
	}
}

// TestHostilePatterns: a pattern as large as the guest can make it, and
// malformed ones, reach the Host whole and come back as its status, with
// the host and the instance going on.
func TestHostilePatterns(t *testing.T) {
	c, h := handPatterns(t, "a/1")
	const at, n = 0x8000, 0x7000 // 28 KiB after the out buffers
	big := strings.Repeat("*?", n/2)
	for _, tc := range []struct {
		pattern string
		want    abi.Status
	}{
		{big, abi.StatusOK},                // a valid glob that matches nothing here
		{"[" + big[1:], abi.StatusInvalid}, // an unclosed set
		{big[1:] + `\`, abi.StatusInvalid}, // a trailing escape
		{"[", abi.StatusInvalid},
		{"", abi.StatusInvalid},
		{"$ssrun/*", abi.StatusDenied},
	} {
		c.write(at, []byte(tc.pattern))
		c.expect("keys", c.call(abi.FnKeys, at, uint64(len(tc.pattern)), i64arg(0), atOut, 0x1000, atOutLen), tc.want)
		c.expect("watch_pattern", c.call(abi.FnWatchPattern, at, uint64(len(tc.pattern)), 0), tc.want)
		if _, last := h.Called(abi.FnKeys); last.Key != tc.pattern {
			t.Fatalf("the Host got a pattern of %d bytes, want %d", len(last.Key), len(tc.pattern))
		}
	}
	c.write(atKey, []byte("a/*"))
	c.expect("keys after", c.call(abi.FnKeys, atKey, 3, i64arg(0), atOut, 0x1000, atOutLen), abi.StatusOK)
}

// TestPatternMisuseTraps: pointer ranges outside memory trap the call,
// naming function and argument, before the Host is asked.
func TestPatternMisuseTraps(t *testing.T) {
	const far = 0xffff0000
	base := map[string][]uint64{
		abi.FnKeys:           {atKey, 1, 0, atOut, 64, atOutLen},
		abi.FnWatchPattern:   {atKey, 1, 0},
		abi.FnUnwatchPattern: {atKey, 1},
	}
	for _, tc := range []struct {
		fn    string
		index int
		value uint64
		arg   string
	}{
		{abi.FnKeys, 0, far, "pattern"},
		{abi.FnKeys, 1, 0xffffffff, "pattern"}, // a 4 GiB pattern: refused before any copy
		{abi.FnKeys, 3, far, "out buffer"},
		{abi.FnKeys, 4, memBytes, "out buffer"},
		{abi.FnKeys, 5, memBytes - 3, "out_len"},
		{abi.FnWatchPattern, 0, far, "pattern"},
		{abi.FnWatchPattern, 1, memBytes, "pattern"},
		{abi.FnUnwatchPattern, 0, memBytes + 1, "pattern"}, // empty, but starts past the end
		{abi.FnUnwatchPattern, 1, 0xffffffff, "pattern"},
	} {
		t.Run(tc.fn+" "+tc.arg, func(t *testing.T) {
			c, h := handPatterns(t, "k")
			c.write(atKey, []byte("k"))
			args := slices.Clone(base[tc.fn])
			args[tc.index] = tc.value
			_, err := c.try(tc.fn, args...)
			var me *misuseError
			if !errors.As(err, &me) {
				t.Fatalf("call: %v; want a trap with *misuseError", err)
			}
			if want := fmt.Sprintf("ssrun.%s: %s [", tc.fn, tc.arg); !strings.HasPrefix(err.Error(), want) {
				t.Fatalf("error %q, want %q...", firstLine(err.Error()), want)
			}
			if n := h.Calls(tc.fn); n != 0 {
				t.Fatalf("the Host was asked %d times", n)
			}
		})
	}
}

// TestLargeRecordNotKept: after a keys record larger than maxKeptRecord,
// the next verb's record does not keep that buffer.
func TestLargeRecordNotKept(t *testing.T) {
	var keys []string
	for i := range 30_000 {
		keys = append(keys, fmt.Sprintf("fleet/%05d/setPoint/%s", i, strings.Repeat("x", 20)))
	}
	h := ruletest.NewPatternHost(keys...)
	s := start(t, compile(t, sharedRuntime(t), "hand.wasm", handGuest(nil).bytes()), h, abi.Limits{})
	c := &handABI{t: t, s: s, h: h.Host}
	c.write(atKey, []byte("fleet/*"))
	c.expect("keys", c.call(abi.FnKeys, atKey, 7, i64arg(30_000), atOut, 16, atOutLen), abi.StatusBufferTooSmall)
	cl := sharedRuntime(t).callerOf(s.in.mod)
	if cap(cl.rec) <= maxKeptRecord {
		t.Fatalf("the keys record (%d bytes) is not larger than maxKeptRecord: the test proves nothing", c.outLen())
	}
	c.h.Put("k", []byte("v"))
	c.write(atKey, []byte("k"))
	c.expect("get", c.call(abi.FnGet, atKey, 1, atOut, 0x1000, atOutLen), abi.StatusOK)
	if cap(cl.rec) > maxKeptRecord {
		t.Fatalf("after a get the record buffer still holds %d bytes", cap(cl.rec))
	}
}

// TestProbePatterns: in the load check watch_pattern and unwatch_pattern
// are accepted (a rule may declare them in its initialisation) and keys,
// which reads the store, is UNAVAILABLE.
func TestProbePatterns(t *testing.T) {
	h := probeHost{r: sharedRuntime(t), rule: "r.wasm"}
	ctx := context.Background()
	if err := h.WatchPattern(ctx, "a/*", abi.WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := h.UnwatchPattern(ctx, "a/*"); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Keys(ctx, "a/*", abi.KeysOptions{}); abi.StatusOf(err) != abi.StatusUnavailable {
		t.Fatalf("keys in the load check: %v", err)
	}
}

// TestRevision2GuestLoads: a module importing only the host functions of
// revision 2 loads and calls them as before (that a Go rule without
// pattern verbs imports none of them: TestRevision1Modules).
func TestRevision2GuestLoads(t *testing.T) {
	rev3 := []string{abi.FnKeys, abi.FnWatchPattern, abi.FnUnwatchPattern}
	rev2 := slices.DeleteFunc(abi.HostFunctions(), func(fn string) bool { return slices.Contains(rev3, fn) })
	h := ruletest.NewPatternHost()
	s := start(t, compile(t, sharedRuntime(t), "hand-r2.wasm", handGuestOf(rev2, nil).bytes()), h, abi.Limits{})
	c := &handABI{t: t, s: s, h: h.Host}
	c.write(atKey, []byte("k"))
	c.expect("watch", c.call(abi.FnWatch, atKey, 1, 0), abi.StatusOK)
	if err := s.Handle(context.Background(), abi.Event{Key: "k", Op: abi.OpSet, Value: []byte("v")}); err != nil {
		t.Fatal(err)
	}
}
