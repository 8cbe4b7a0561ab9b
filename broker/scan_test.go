package broker_test

// SCAN over MQTT (statestore-protocol.md §6.1, issue 27): the SDK's byte
// vectors come out of the store, pages follow their tokens, and with an ACL
// a client lists only the keys it may read.

import (
	"fmt"
	"slices"
	"testing"

	"github.com/eclipse/paho.golang/packets"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

func TestScanSDKVector(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	for _, k := range []string{"key1", "key2", "other"} {
		c.set(k, "v")
	}
	expectPayload(t, c.call("SCAN", "key*"), "*1\r\n*2\r\n$4\r\nkey1\r\n$4\r\nkey2\r\n")
	expectPayload(t, c.call("SCAN", "key*", "1;forged;key1"), "-ERR syntax error\r\n")
}

// scanAllMQTT pages through pattern with c.
func scanAllMQTT(t *testing.T, c *client, pattern string) []string {
	t.Helper()
	var keys []string
	args := []string{"SCAN", pattern}
	for {
		r := c.call(args...)
		page, token, more, err := resp.ParseScanReply(r.payload)
		if err != nil {
			t.Fatalf("SCAN %s: %q: %v", pattern, r.payload, err)
		}
		for _, k := range page {
			keys = append(keys, string(k))
		}
		if !more {
			return keys
		}
		args = []string{"SCAN", pattern, string(token)}
	}
}

func TestScanPagesOverMQTTWithinTheClientsPacketSize(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	var want []string
	for i := range 1500 {
		k := fmt.Sprintf("fleet/%04d/setPoint", i)
		want = append(want, k)
		c.set(k, "v")
	}
	if got := scanAllMQTT(t, c, "fleet/*/setPoint"); !slices.Equal(got, want) {
		t.Fatalf("%d keys, want %d", len(got), len(want))
	}
	// A client taking packets of at most 4 KiB gets pages that fit.
	const id = "small-packets"
	r, _ := connectRawWith(t, b, id, func(c *packets.Connect) {
		limit := uint32(4096)
		c.Properties = &packets.Properties{MaximumPacketSize: &limit}
	})
	rt := wire.ResponseTopic(id)
	r.subscribe(rt)
	r.write(rawRequest(10, rt, newCorr(), "", false, "SCAN", "fleet/*"))
	p := r.nextPublish()
	page, _, more, err := resp.ParseScanReply(p.Payload)
	if err != nil || !more || len(page) == 0 || len(p.Payload) > 4096 {
		t.Fatalf("first page for a 4 KiB client: %d keys, more %v, %d bytes, %v", len(page), more, len(p.Payload), err)
	}
}

// With an ACL, bob lists only the keys he may read.
func TestScanListsOnlyReadableKeys(t *testing.T) {
	b, _ := authBroker(t, keysACL)
	a := dial(t, b, alice)
	bb := dial(t, b, bob)
	for _, k := range []string{"alice/1", "alice/2"} {
		a.set(k, "v")
	}
	bb.set("bob/1", "v")
	for _, c := range []struct {
		who        *client
		want, hide []string
	}{{bb, []string{"bob/1"}, []string{"alice/1", "alice/2"}}, {a, []string{"alice/1", "alice/2"}, []string{"bob/1"}}} {
		got := scanAllMQTT(t, c.who, "*")
		for _, k := range c.want {
			if !slices.Contains(got, k) {
				t.Errorf("%s's SCAN * lacks %s: %q", c.who.id, k, got)
			}
		}
		for _, k := range c.hide {
			if slices.Contains(got, k) {
				t.Errorf("%s's SCAN * lists %s, which it may not read: %q", c.who.id, k, got)
			}
		}
	}
}
