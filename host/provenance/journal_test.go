package provenance

import (
	"fmt"
	"strings"
	"testing"
)

func TestJournalEvictsLeastRecentlyWritten(t *testing.T) {
	j := NewJournal(3, 1<<20)
	for _, k := range []string{"a", "b", "c", "a", "d"} { // a is written again: b is the oldest
		j.Record(Write{Key: k, Rule: "r.lua", Op: "SET"}, []byte("v-"+k))
	}
	for k, want := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		if _, ok := j.Get(k); ok != want {
			t.Errorf("get(%s) found %t, want %t", k, ok, want)
		}
	}
	if n, _ := j.Size(); n != 3 {
		t.Errorf("%d entries, want 3", n)
	}
}

func TestJournalBoundedByBytes(t *testing.T) {
	value := []byte(strings.Repeat("x", JournalValueBytes))
	one := entrySize(Write{Key: "k000", Rule: "r.lua", Value: string(value)})
	j := NewJournal(1000, 10*one)
	for i := range 25 {
		j.Record(Write{Key: fmt.Sprintf("k%03d", i), Rule: "r.lua"}, value)
	}
	n, b := j.Size()
	if n != 10 || b > 10*one {
		t.Fatalf("%d entries of %d bytes, want the last 10 within %d bytes", n, b, 10*one)
	}
	if _, ok := j.Get("k014"); ok {
		t.Error("k014 kept: the oldest keys should go first")
	}
	if _, ok := j.Get("k024"); !ok {
		t.Error("k024, the latest, forgotten")
	}
	// An entry larger than the bound on its own is kept, alone.
	j = NewJournal(1000, 10)
	j.Record(Write{Key: "a"}, nil)
	j.Record(Write{Key: "b"}, nil)
	if n, _ := j.Size(); n != 1 {
		t.Fatalf("%d entries, want the latest alone", n)
	}
	if _, ok := j.Get("b"); !ok {
		t.Fatal("the latest entry was not kept")
	}
}

func TestJournalCutsValues(t *testing.T) {
	j := NewJournal(0, 0)
	big := []byte(strings.Repeat("0123456789", 100)) // 1,000 bytes
	j.Record(Write{Key: "big", Rule: "r.lua", Op: "SET"}, big)
	w, _ := j.Get("big")
	if w.Value != string(big[:JournalValueBytes]) || w.ValueSize != len(big) || !w.Truncated {
		t.Errorf("value %d bytes (size %d, cut %t), want the first %d of %d, cut", len(w.Value), w.ValueSize, w.Truncated, JournalValueBytes, len(big))
	}
	big[0] = 'X' // the journal holds a copy
	if w, _ := j.Get("big"); w.Value[0] != '0' {
		t.Error("the journal shares the caller's buffer")
	}
	exact := []byte(strings.Repeat("y", JournalValueBytes))
	j.Record(Write{Key: "exact"}, exact)
	if w, _ := j.Get("exact"); w.Value != string(exact) || w.Truncated {
		t.Errorf("a value of exactly %d bytes: %d bytes kept, cut %t", JournalValueBytes, len(w.Value), w.Truncated)
	}
	if w, _ := j.Get("missing"); w.Key != "" {
		t.Errorf("get(missing) = %+v", w)
	}
}
