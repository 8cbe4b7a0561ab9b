package timers

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
)

const t0 int64 = 1_732_000_000_000

// The encodings reject what they cannot read, whatever the bytes.
func TestTimerEncodings(t *testing.T) {
	rec := EncodeTimerRecord(t0, 250, []byte("pay"))
	if d, ev, p, err := DecodeTimerRecord(rec); err != nil || d != t0 || ev != 250 || string(p) != "pay" {
		t.Fatalf("record round trip: %d %d %q %v", d, ev, p, err)
	}
	for _, bad := range [][]byte{nil, {1}, rec[:16], append([]byte{2}, rec[1:]...), EncodeTimerRecord(-1, 0, nil), EncodeTimerRecord(t0, -5, nil)} {
		if _, _, _, err := DecodeTimerRecord(bad); !errors.Is(err, errTimerFormat) {
			t.Errorf("record %v: %v, want errTimerFormat", bad, err)
		}
	}
	names := []string{"b", "a", strings.Repeat("x", MaxTimerName), "with/slash"}
	got, err := DecodeTimerShard(EncodeTimerShard(names))
	if err != nil || !slices.Equal(got, []string{"a", "b", "with/slash", strings.Repeat("x", MaxTimerName)}) {
		t.Fatalf("shard round trip: %q, %v", got, err)
	}
	for _, bad := range [][]byte{nil, {2}, {1, 0}, {1, 5, 'a'}, append([]byte{1, 0x81, 0x02}, strings.Repeat("y", 257)...)} {
		if _, err := DecodeTimerShard(bad); !errors.Is(err, errTimerFormat) {
			t.Errorf("shard %v: %v, want errTimerFormat", bad, err)
		}
	}
	var d TimerDir
	d.Put(0, true)
	d.Put(1023, true)
	if back, err := DecodeTimerDir(d.Encode()); err != nil || back != d || !back.Has(1023) || back.Has(5) {
		t.Fatalf("directory round trip: %v", err)
	}
	if _, err := DecodeTimerDir([]byte{1, 2}); !errors.Is(err, errTimerFormat) {
		t.Fatalf("short directory: %v", err)
	}
}

// The decoders of the timer values found in the store take any bytes
// without panicking, and what they accept encodes back to the same bytes (a shard's names,
// sorted).
func FuzzTimerDecoders(f *testing.F) {
	f.Add(EncodeTimerRecord(t0, 250, []byte("pay")))
	f.Add(EncodeTimerShard([]string{"a", "bb", ""}))
	all := AllTimerShards()
	f.Add(all.Encode())
	f.Add([]byte{1, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		if d, ev, p, err := DecodeTimerRecord(b); err == nil {
			if back := EncodeTimerRecord(d, ev, p); !bytes.Equal(back, b) {
				t.Fatalf("record %x decodes to (%d, %d, %q), which encodes to %x", b, d, ev, p, back)
			}
		}
		if names, err := DecodeTimerShard(b); err == nil { // names are encoded sorted
			again, err := DecodeTimerShard(EncodeTimerShard(names))
			if slices.Sort(names); err != nil || !slices.Equal(again, names) {
				t.Fatalf("shard %x decodes to %q, which encodes to one that decodes to %q, %v", b, names, again, err)
			}
		}
		if dir, err := DecodeTimerDir(b); err == nil {
			if back := dir.Encode(); !bytes.Equal(back, b) {
				t.Fatalf("directory %x decodes to %x", b, back)
			}
		}
	})
}
