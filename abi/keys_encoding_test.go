package abi

import (
	"bytes"
	"errors"
	"runtime"
	"slices"
	"testing"
)

// TestKeysRoundTrip: a keys record (revision 3) decodes to the keys it was
// made of, binary keys and empty lists included, and has KeysSize bytes.
func TestKeysRoundTrip(t *testing.T) {
	for _, keys := range [][]string{
		{},
		{"thermostats/0001/setPoint"},
		{"a", "b\x00\xff", "c\r\n", string(bytes.Repeat([]byte("k"), 70_000))},
	} {
		b := AppendKeys(nil, keys)
		if len(b) != KeysSize(keys) {
			t.Errorf("KeysSize = %d, encoded %d", KeysSize(keys), len(b))
		}
		got, err := DecodeKeys(b)
		if err != nil {
			t.Fatalf("DecodeKeys(%d keys): %v", len(keys), err)
		}
		if !slices.Equal(got, keys) {
			t.Fatalf("round trip: got %q, want %q", got, keys)
		}
	}
	// The byte layout: a u32 count, then length-prefixed keys.
	want := []byte{2, 0, 0, 0, 1, 0, 0, 0, 'a', 2, 0, 0, 0, 'b', 'c'}
	if got := AppendKeys(nil, []string{"a", "bc"}); !bytes.Equal(got, want) {
		t.Fatalf("AppendKeys = %x, want %x", got, want)
	}
}

// TestDecodeKeysRejects: every malformed record is refused with
// ErrEncoding, a huge count before anything is allocated for it.
func TestDecodeKeysRejects(t *testing.T) {
	good := AppendKeys(nil, []string{"a", "bc"})
	cases := map[string][]byte{
		"empty":            nil,
		"short count":      good[:3],
		"count too large":  {3, 0, 0, 0, 1, 0, 0, 0, 'a'},
		"huge count":       {0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0},
		"truncated key":    good[:len(good)-1],
		"huge key length":  {1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff},
		"trailing":         append(slices.Clone(good), 0),
		"zero with a tail": {0, 0, 0, 0, 1, 0, 0, 0, 'a'},
	}
	for name, b := range cases {
		if keys, err := DecodeKeys(b); !errors.Is(err, ErrEncoding) {
			t.Errorf("%s: DecodeKeys = %q, %v; want ErrEncoding", name, keys, err)
		}
	}
	// A count of 4 billion allocates the error alone, not a slice for it.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _ = DecodeKeys(cases["huge count"])
	runtime.ReadMemStats(&after)
	if n := after.TotalAlloc - before.TotalAlloc; n > 1<<10 {
		t.Errorf("DecodeKeys of a huge count allocated %d bytes", n)
	}
}

func FuzzDecodeKeys(f *testing.F) {
	f.Add(AppendKeys(nil, nil))
	f.Add(AppendKeys(nil, []string{"a", "b\x00"}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add([]byte{1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, err := DecodeKeys(b)
		if err != nil {
			if !errors.Is(err, ErrEncoding) {
				t.Fatalf("error does not wrap ErrEncoding: %v", err)
			}
			return
		}
		if enc := AppendKeys(nil, keys); !bytes.Equal(enc, b) {
			t.Fatalf("re-encoded %x, input %x", enc, b)
		}
	})
}
