package wasm

// keyCache holds the strings of the keys (and lock and timer names) an
// instance named last, so that naming one again, which is what a rule
// does (the keys it watches, reads and writes are few), takes a
// comparison instead of a string allocation per host call. Direct-mapped:
// a key goes in one slot, found from its length and two of its bytes, and
// replaces what was there. Only the goroutine running the instance uses
// it (caller).
type keyCache [keySlots]string

const (
	keySlots = 16
	// maxCachedKey bounds what a slot holds: a longer key is copied each
	// time, so the cache of an instance keeps at most 16 × 256 bytes.
	maxCachedKey = 256
)

// string returns b as a string: the one cached for its slot when it has
// the same bytes, else a copy, then cached.
func (c *keyCache) string(b []byte) string {
	n := len(b)
	if n == 0 || n > maxCachedKey {
		return string(b)
	}
	// Keys of one rule often differ in their last byte ("room/1/temp"
	// and "room/2/temp" do not: the middle byte tells those apart).
	slot := &c[(uint(n)+uint(b[n-1])*7+uint(b[n/2])*3)%keySlots]
	if *slot == string(b) { // compared without a conversion
		return *slot
	}
	s := string(b)
	*slot = s
	return s
}

// key copies a guest key (or name) argument, trapping the call if it is out
// of range, as str; the string may be one c returned before.
func (c *caller) key(mem guestMem, fn, arg string, ptr, n uint64) string {
	return c.keys.string(mem.view(fn, arg, ptr, n))
}
