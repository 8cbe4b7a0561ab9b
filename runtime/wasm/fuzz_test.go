package wasm

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/ruletest"
)

// FuzzOptionArgs: the scalar decoders accept exactly their documented
// domain and convert milliseconds exactly.
func FuzzOptionArgs(f *testing.F) {
	f.Add(int32(0), int32(0), int64(0), int64(0), "k", "")
	f.Add(int32(2), int32(1), int64(1500), int64(250), "k\x00", "L")
	f.Add(int32(3), int32(2), int64(-1), int64(-1), "", "")
	f.Add(int32(-1), int32(-1), maxMillis, maxMillis+1, "x", "y")
	f.Fuzz(func(t *testing.T, cond, flags int32, ttl, wait int64, key, fence string) {
		okMillis := func(ms int64) bool { return ms >= 0 && ms <= maxMillis }
		exact := func(d time.Duration, ms int64) bool {
			return d%time.Millisecond == 0 && int64(d/time.Millisecond) == ms
		}
		invalid := func(err error) bool {
			var e *abi.Error
			return errors.As(err, &e) && e.Status == abi.StatusInvalid && strings.Contains(e.Msg, fmt.Sprintf("%q", key))
		}

		o, err := setOptions(key, cond, ttl, fence)
		if want := cond >= 0 && cond <= 2 && okMillis(ttl); want != (err == nil) {
			t.Fatalf("setOptions(%d, %d): %v", cond, ttl, err)
		}
		if err == nil && (int32(o.Cond) != cond || !exact(o.TTL, ttl) || o.Fence != fence) {
			t.Fatalf("setOptions(%d, %d, %q) = %+v", cond, ttl, fence, o)
		}
		if err != nil && !invalid(err) {
			t.Fatalf("setOptions error %v", err)
		}

		w, err := watchOptions(abi.FnWatch, key, flags)
		if want := flags == 0 || flags == 1; want != (err == nil) || (err == nil && w.Self != (flags == 1)) || (err != nil && !invalid(err)) {
			t.Fatalf("watchOptions(%d) = %+v, %v", flags, w, err)
		}

		d, lo, err := lockArgs(key, ttl, wait)
		if want := okMillis(ttl) && okMillis(wait); want != (err == nil) || (err != nil && !invalid(err)) {
			t.Fatalf("lockArgs(%d, %d): %v", ttl, wait, err)
		}
		if err == nil && (!exact(d, ttl) || !exact(lo.Wait, wait)) {
			t.Fatalf("lockArgs(%d, %d) = %v, %v", ttl, wait, d, lo.Wait)
		}

		checkView(t, make(guestMem, uint32(ttl)%4096), uint64(uint32(wait)), uint64(uint32(cond)))
	})
}

// checkView checks m.view(ptr, n): a range past m's end traps with a
// *misuseError, any other is m's bytes there, capped so that an append
// cannot write past it.
func checkView(t *testing.T, m guestMem, ptr, n uint64) {
	t.Helper()
	inside := ptr+n <= uint64(len(m))
	defer func() {
		r := recover()
		if _, misuse := r.(*misuseError); (r != nil) != !inside || (r != nil && !misuse) {
			t.Fatalf("view [%d, %d+%d) of %d bytes: recovered %v", ptr, ptr, n, len(m), r)
		}
	}()
	v := m.view("get", "key", ptr, n)
	if uint64(len(v)) != n || uint64(cap(v)) != n || (n > 0 && &v[0] != &m[ptr]) {
		t.Fatalf("view [%d, %d+%d) of %d bytes: len %d cap %d", ptr, ptr, n, len(m), len(v), cap(v))
	}
}

// FuzzHostCall calls each host function of a live instance with arbitrary
// arguments: a call either returns a defined status or traps as ABI misuse;
// nothing else may go wrong in the host.
func FuzzHostCall(f *testing.F) {
	var once sync.Once
	var c *handABI
	f.Add(uint8(0), []byte{0, 1, 0, 0, 0, 0, 0, 0, 1})
	f.Add(uint8(1), binary.LittleEndian.AppendUint64(nil, 0xffff0000))
	f.Add(uint8(6), []byte{})
	f.Add(uint8(9), bytes.Repeat([]byte{0x10, 0, 0, 0, 0, 0, 0, 0}, 11))
	f.Fuzz(func(t *testing.T, fn uint8, raw []byte) {
		once.Do(func() {
			// One instance for the whole fuzz run, closed with the shared
			// Runtime (a per-input t.Cleanup would close it too early).
			p, err := sharedRuntime(t).Compile(context.Background(), "hand.wasm", handGuest(nil).bytes())
			if err != nil {
				t.Fatal(err)
			}
			h := ruletest.NewPatternHost("key", "key/1", "key/2") // keys answers with a record
			s, err := p.Start(context.Background(), h, abi.Limits{})
			if err != nil {
				t.Fatal(err)
			}
			c = &handABI{s: s.(*script), h: h.Host}
		})
		if c == nil {
			t.Fatal("no instance")
		}
		c.t = t
		c.write(atKey, []byte("key"))
		c.h.Put("key", bytes.Repeat([]byte("v"), 300))
		name := abi.HostFunctions()[int(fn)%len(abi.HostFunctions())]
		args := make([]uint64, len(handParams[name]))
		for i := range args {
			var b [8]byte
			if len(raw) > 0 {
				n := copy(b[:], raw)
				raw = raw[n:]
			}
			args[i] = binary.LittleEndian.Uint64(b[:])
			if handParams[name][i] == i32 {
				args[i] = api.EncodeU32(uint32(args[i])) // i32 params carry 32 bits
			}
		}
		st, err := c.try(name, args...)
		var me *misuseError
		switch {
		case err != nil && !errors.As(err, &me):
			t.Fatalf("%s%v: %v", name, args, err)
		case err == nil && (st < 0 || int(st) >= len(abi.Statuses())):
			t.Fatalf("%s%v: undefined status %d", name, args, st)
		}
	})
}

// FuzzLineWriter: whatever the write boundaries, the emitted lines are the
// output split at newlines, each cut into pieces of at most maxLine bytes.
func FuzzLineWriter(f *testing.F) {
	f.Add([]byte("a\nb\n\npartial"), uint8(1))
	f.Add(bytes.Repeat([]byte("x"), 2*maxLine+3), uint8(7))
	f.Add(append(bytes.Repeat([]byte("y"), maxLine), '\n', '\n'), uint8(0))
	f.Add([]byte("fatal error: out of memory\n"), uint8(3))
	f.Fuzz(func(t *testing.T, out []byte, seed uint8) {
		var got []string
		w := &lineWriter{emit: func(l string) { got = append(got, l) }}
		for rest, step := out, int(seed)+1; len(rest) > 0; step = step*5%251 + 1 {
			n := min(step, len(rest))
			if k, err := w.Write(rest[:n]); k != n || err != nil {
				t.Fatalf("Write = %d, %v", k, err)
			}
			rest = rest[n:]
		}
		w.Flush()

		var want []string
		lines := strings.Split(string(out), "\n")
		for i, l := range lines {
			if i == len(lines)-1 && l == "" {
				break // no partial line
			}
			for len(l) > maxLine {
				want = append(want, l[:maxLine])
				l = l[maxLine:]
			}
			want = append(want, l)
		}
		if len(got) != len(want) {
			t.Fatalf("%d lines, want %d", len(got), len(want))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("line %d: %q, want %q", i, got[i], want[i])
			}
		}
		if oom := bytes.Contains(out, []byte("fatal error: out of memory")); oom && !w.sawOOM {
			t.Fatal("out-of-memory line not noticed")
		}
	})
}
