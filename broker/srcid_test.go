package broker_test

import (
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// A notification names the client whose SET, DEL or VDEL made the change
// in __srcId (§13.3 leaves it optional), so a watcher can tell who wrote
// (ssrun why); an expiry, which no client made, names nobody.
func TestNotifyNamesWriter(t *testing.T) {
	b := brokertest.Start(t)
	watcher := dial(t, b, withID("watcher"))
	writer := dial(t, b, withID("door-sensor"))
	watcher.keyNotify("door")
	writer.set("door", "open")
	expectPayload(t, writer.call("VDEL", "door", "open"), ":1\r\n")
	writer.set("door", "open")
	expectPayload(t, writer.call("DEL", "door"), ":1\r\n")
	expectPayload(t, writer.call("SET", "door", "ajar", "PX", "1"), "+OK\r\n")
	want := []string{resp.OpSet, resp.OpDelete, resp.OpSet, resp.OpDelete, resp.OpSet}
	for i, op := range want {
		n := watcher.nextNote()
		if src := n.pub.Properties.User.Get(wire.PropSourceID); n.op != op || src != "door-sensor" {
			t.Fatalf("notification %d: %s from %q, want %s from door-sensor", i, n.op, src, op)
		}
	}
	n := watcher.nextNote() // the expiry
	if src := n.pub.Properties.User.Get(wire.PropSourceID); n.op != resp.OpDelete || src != "" {
		t.Fatalf("expiry: %s from %q, want DELETE from nobody", n.op, src)
	}
}
