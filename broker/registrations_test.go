package broker_test

// Issue 25, point 2: KEYNOTIFY registrations hold their keys, which a
// client chooses; they count against the store's quotas with the stored
// keys, and one client id holds at most an eighth of either.

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/wire"
)

const quotaErr = "-ERR " + wire.ErrTextQuotaExceeded + "\r\n"

// 80 registrations of 3.9 MB keys from one connection held 460 MB with
// --max-bytes 64MiB while the store held no key.
func TestRegistrationsCountAgainstTheByteQuota(t *testing.T) {
	const maxBytes = 64 << 20
	b := brokertest.Start(t, func(c *broker.Config) { c.MaxBytes = maxBytes })
	before := heapLive()
	c := dial(t, b)
	key := func(i int) string { return fmt.Sprintf("%03d", i) + strings.Repeat("k", 3_900_000) }
	registered := 0
	for i := range 80 {
		switch r := c.call("KEYNOTIFY", key(i)); string(r.payload) {
		case "+OK\r\n":
			registered++
		case quotaErr:
		default:
			t.Fatalf("KEYNOTIFY %d: %s", i, r)
		}
	}
	if share := maxBytes / 8 / 3_900_000; registered != share {
		t.Fatalf("%d registrations of 3.9 MB keys accepted, want one client's share of 64 MiB: %d", registered, share)
	}
	if live := heapLive(); live > before+maxBytes/8+16<<20 {
		t.Fatalf("live heap grew by %d MiB for %d registrations", (live-before)>>20, registered)
	}
	// STOP gives the room back.
	expectPayload(t, c.call("KEYNOTIFY", key(0), "STOP"), "+OK\r\n")
	c.keyNotify(key(79))
	// Registrations and stored data share the store's bound: other clients
	// fill it with registrations, then a SET that would pass it fails.
	for i := 0; i < 7; i++ {
		other := dial(t, b)
		other.keyNotify(key(100+2*i), key(101+2*i))
	}
	// 16 registrations of 3.9 MB: 62.4 MB of 64 MiB; 4.7 MB are left.
	value := strings.Repeat("v", 3_000_000)
	c.set("big1", value)
	expectPayload(t, c.call("SET", "big2", value), quotaErr)
	c.set("small", "v")
	if s := b.Stats(); s.Registrations != 16 {
		t.Fatalf("%d registrations, want 16", s.Registrations)
	}
}

// The key quota counts registrations too, and a client's share of it; a
// connection's end gives its registrations back.
func TestRegistrationsCountAgainstTheKeyQuota(t *testing.T) {
	b := brokertest.Start(t, func(c *broker.Config) { c.Quota = 16 })
	c := dial(t, b)
	c.keyNotify("a", "b")
	c.keyNotify("a")                                     // already held: no more room taken
	expectPayload(t, c.call("KEYNOTIFY", "c"), quotaErr) // 16/8 = 2 per client
	for i := range 14 {
		expectPayload(t, c.call("SET", fmt.Sprint("key", i), "v"), "+OK\r\n")
	}
	expectPayload(t, c.call("SET", "one-too-many", "v"), quotaErr) // 14 keys + 2 registrations
	c.close()
	testutil.WaitFor(t, "the closed connection's registrations to be dropped", func() bool { return b.Stats().Registrations == 0 })
	other := dial(t, b)
	other.set("one-too-many", "v")
}
