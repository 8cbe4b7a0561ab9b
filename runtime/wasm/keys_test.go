package wasm

import (
	"bytes"
	"strings"
	"testing"
	"unsafe"
)

// keyCache returns the string of the bytes it is given, whatever it held
// before: keys that share a slot replace each other, a long key is never
// kept, and the string stays the same when the guest's bytes change.
func TestKeyCache(t *testing.T) {
	var c keyCache
	long := strings.Repeat("k", maxCachedKey+1)
	keys := []string{"room/1/temp", "room/2/temp", "a", "b", "", long, "room/1/temp", long, "a"}
	for i := range 64 {
		keys = append(keys, strings.Repeat("x", i%20)+string(rune('a'+i%26)))
	}
	for round := range 2 {
		for _, k := range keys {
			b := []byte(k)
			got := c.string(b)
			copy(b, bytes.Repeat([]byte{'#'}, len(b))) // the guest reuses its memory
			if got != k {
				t.Fatalf("round %d: string(%q) = %q", round, k, got)
			}
		}
	}
}

// A key named again costs no allocation and is the same string; a key
// longer than maxCachedKey is copied each time.
func TestKeyCacheReuses(t *testing.T) {
	var c keyCache
	b := []byte("sensors/hall/temperature")
	first := c.string(b)
	if again := c.string(b); unsafe.StringData(again) != unsafe.StringData(first) {
		t.Error("the same key gave another string")
	}
	if n := testing.AllocsPerRun(100, func() { c.string(b) }); n != 0 {
		t.Errorf("naming a cached key: %v allocations, want 0", n)
	}
	long := bytes.Repeat([]byte("k"), maxCachedKey+1)
	c.string(long)
	if n := testing.AllocsPerRun(100, func() { c.string(long) }); n != 1 {
		t.Errorf("naming a key of %d bytes: %v allocations, want 1 (not kept)", len(long), n)
	}
}

// FuzzKeyCache names the keys of a random sequence (split at '|'): each
// call returns exactly its bytes.
func FuzzKeyCache(f *testing.F) {
	f.Add([]byte("a|b|a|room/1/t|room/2/t||a"))
	f.Add(bytes.Repeat([]byte("ab|"), 100))
	f.Fuzz(func(t *testing.T, seq []byte) {
		var c keyCache
		for k := range bytes.SplitSeq(seq, []byte("|")) {
			want := string(k)
			if got := c.string(k); got != want {
				t.Fatalf("string(%q) = %q", want, got)
			}
		}
	})
}
