package broker

import (
	"strings"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/store"
)

func TestDedupCacheExpiresAndBounds(t *testing.T) {
	var c dedupCache
	now := time.Unix(1000, 0)
	k := dedupKey{"client", "a", "t"}
	e, first := c.begin(k, 1, now, time.Second)
	if !first {
		t.Fatal("first begin not first")
	}
	e.finish(store.Reply{Payload: []byte("+OK\r\n")}, &c)
	if e2, first := c.begin(k, 1, now.Add(999*time.Millisecond), time.Second); first || e2 != e {
		t.Fatal("live entry not found")
	}
	if _, first := c.begin(dedupKey{"client", "a", "other"}, 1, now, time.Second); !first {
		t.Fatal("a different response topic is a different request")
	}
	if _, first := c.begin(k, 1, now.Add(time.Second), time.Second); !first {
		t.Fatal("expired entry replayed")
	}
	for i := range dedupMaxEntries + 10 {
		e, _ := c.begin(dedupKey{"c", strings.Repeat("x", i%7) + string(rune(i)), "t"}, 1, now, time.Hour)
		e.finish(store.Reply{Payload: []byte("$-1\r\n")}, &c)
	}
	if c.order.Len() > dedupMaxEntries || len(c.m) > dedupMaxEntries {
		t.Fatalf("%d entries kept, bound %d", c.order.Len(), dedupMaxEntries)
	}
	big := make([]byte, dedupMaxBytes/4)
	for i := range 8 {
		e, _ := c.begin(dedupKey{"c", "big" + string(rune('0'+i)), "t"}, 1, now, time.Hour)
		e.finish(store.Reply{Payload: big}, &c)
	}
	c.begin(dedupKey{"c", "last", "t"}, 1, now, time.Hour)
	if c.bytes > dedupMaxBytes+len(big) {
		t.Fatalf("%d bytes cached, bound %d", c.bytes, dedupMaxBytes)
	}
}

// Only an identical request under the same key is a redelivery; a different
// one replaces the entry and runs.
func TestDedupCacheReplaysOnlyIdenticalRequests(t *testing.T) {
	var c dedupCache
	now := time.Unix(1000, 0)
	k := dedupKey{"client", "corr", "topic"}
	e, _ := c.begin(k, 1, now, time.Minute)
	e.finish(store.Reply{Payload: []byte("+OK\r\n")}, &c)
	e2, first := c.begin(k, 2, now, time.Minute)
	if !first || e2 == e {
		t.Fatal("a different request under a reused correlation id was replayed")
	}
	e2.finish(store.Reply{Payload: []byte(":1\r\n")}, &c)
	if e3, first := c.begin(k, 2, now, time.Minute); first || e3 != e2 {
		t.Fatal("a redelivery of the second request was not replayed")
	}
	if len(c.m) != 1 || c.order.Len() != 1 {
		t.Fatalf("%d entries, want the replaced one only", len(c.m))
	}
	if want := len("client") + len("corr") + len("topic") + len(":1\r\n"); c.bytes != want {
		t.Fatalf("%d bytes counted, want %d", c.bytes, want)
	}
}

func TestFingerprintCoversPayloadAndUserProperties(t *testing.T) {
	base := packets.Packet{Payload: []byte("*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"),
		Properties: packets.Properties{User: []packets.UserProperty{{Key: "__ts", Val: "1:0:a"}}}}
	same := base
	same.Properties.User = append([]packets.UserProperty(nil), base.Properties.User...)
	if fingerprint(&base) != fingerprint(&same) {
		t.Fatal("identical requests fingerprint differently")
	}
	for name, mod := range map[string]func(p *packets.Packet){
		"payload": func(p *packets.Packet) { p.Payload = []byte("*2\r\n$3\r\nDEL\r\n$1\r\nk\r\n") },
		"__ts":    func(p *packets.Packet) { p.Properties.User = []packets.UserProperty{{Key: "__ts", Val: "1:1:a"}} },
		"added __ft": func(p *packets.Packet) {
			p.Properties.User = append(p.Properties.User, packets.UserProperty{Key: "__ft", Val: "1:0:a"})
		},
		"key/val shift": func(p *packets.Packet) { p.Properties.User = []packets.UserProperty{{Key: "__ts1", Val: ":0:a"}} },
	} {
		p := base
		p.Properties.User = append([]packets.UserProperty(nil), base.Properties.User...)
		mod(&p)
		if fingerprint(&p) == fingerprint(&base) {
			t.Errorf("%s: changed request has the same fingerprint", name)
		}
	}
}
