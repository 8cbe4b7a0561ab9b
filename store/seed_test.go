package store

import (
	"slices"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
)

// seedWorld is a store in memory on a clock the test moves, an observer,
// and a __ts of the clock's time.
func seedWorld() (*clockT, *Store, *recorder, string) {
	clk := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	ts := hlc.HLC{Wall: clk.now().UnixMilli(), Node: "c"}.String()
	return clk, New(clk.now, Quota{Keys: -1, Bytes: -1}), &recorder{id: "c"}, ts
}

// A seeded key reads back with the value and version it was given, and
// behaves as any key of the store: NX refuses it, NEX compares with it, a
// write gets a version above it, and DEL removes it with a notification.
// Seeding and forgetting notify no one.
func TestSeedKeepsValueAndVersion(t *testing.T) {
	clk, s, o, ts := seedWorld()
	run(s, o, nil, "KEYNOTIFY", "k")
	ahead := hlc.HLC{Wall: clk.now().UnixMilli() + 5000, Counter: 7, Node: "StateStore"} // a store whose clock is ahead
	if err := s.Seed([]byte("k"), []byte("real"), ahead); err != nil {
		t.Fatal(err)
	}
	r := s.Execute(Request{Payload: resp.EncodeRequest([]byte("GET"), []byte("k"))})
	if string(r.Payload) != "$4\r\nreal\r\n" || r.Version != ahead {
		t.Fatalf("GET after Seed: %q %v, want real at %v", r.Payload, r.Version, ahead)
	}
	if got := run(s, o, &ts, "SET", "k", "other", "NX"); got != ":-1\r\n" {
		t.Fatalf("SET NX of a seeded key: %q, want not applied", got)
	}
	if got := run(s, o, &ts, "SET", "k", "real", "NEX"); got != "+OK\r\n" {
		t.Fatalf("SET NEX of the seeded value: %q, want OK", got)
	}
	r = s.Execute(Request{Payload: resp.EncodeRequest([]byte("GET"), []byte("k"))})
	if r.Version.Compare(ahead) <= 0 {
		t.Fatalf("version after a write %v, want above the seeded %v", r.Version, ahead)
	}
	if err := s.Seed([]byte("gone"), nil, ahead); err != nil {
		t.Fatal(err)
	}
	if err := s.Forget([]byte("gone")); err != nil {
		t.Fatal(err)
	}
	if got := run(s, o, nil, "GET", "gone"); got != "$-1\r\n" {
		t.Fatalf("GET of a forgotten key: %q", got)
	}
	if keys, _, _ := s.Stats(); keys != 1 {
		t.Fatalf("%d keys, want k only", keys)
	}
	if keys, _ := scanAll(t, s, Request{}, "*", nil); !slices.Equal(keys, []string{"k"}) || s.index.Len() != 1 {
		t.Fatalf("SCAN * lists %q (%d keys in the index), want the seeded k only", keys, s.index.Len())
	}
	if got := run(s, o, nil, "DEL", "k"); got != ":1\r\n" {
		t.Fatalf("DEL of the seeded key: %q", got)
	}
	if got := o.ops(); got != "k SET,k DELETE" {
		t.Fatalf("notified %q, want the SET and the DEL only (not the seed)", got)
	}
}

// Seed replaces an entry with an expiry (its deadline goes with it), and
// refuses a version too far ahead of the clock, changing nothing.
func TestSeedReplacesAndRefuses(t *testing.T) {
	clk, s, o, ts := seedWorld()
	run(s, o, &ts, "SET", "k", "short", "PX", "10")
	v := hlc.HLC{Wall: clk.now().UnixMilli(), Counter: 3, Node: "StateStore"}
	if err := s.Seed([]byte("k"), []byte("seeded"), v); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	if got := run(s, o, nil, "GET", "k"); got != "$6\r\nseeded\r\n" {
		t.Fatalf("GET after the replaced entry's deadline: %q", got)
	}
	far := hlc.HLC{Wall: clk.now().Add(2 * hlc.MaxSkew).UnixMilli(), Node: "StateStore"}
	if err := s.Seed([]byte("k"), []byte("future"), far); err == nil {
		t.Fatal("Seed of a version beyond the skew succeeded")
	}
	if got := run(s, o, nil, "GET", "k"); got != "$6\r\nseeded\r\n" {
		t.Fatalf("GET after a refused Seed: %q", got)
	}
}

// A store with a data directory is not seeded: what it holds is what its
// journal says.
func TestSeedRefusedWithDataDirectory(t *testing.T) {
	s := New(time.Now, Quota{Keys: -1, Bytes: -1})
	if _, err := s.OpenData(PersistConfig{Dir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	if err := s.Seed([]byte("k"), []byte("v"), hlc.HLC{Wall: 1, Node: "n"}); err == nil {
		t.Fatal("Seed of a journaled store succeeded")
	}
	if err := s.Forget([]byte("k")); err == nil {
		t.Fatal("Forget of a journaled store succeeded")
	}
}
