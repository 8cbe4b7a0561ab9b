package protocol

import (
	"context"
	"testing"
	"time"
)

// A notification that reaches a client with no ready connection (a resumed
// session's queued message, redelivered while the client still
// subscribes) is dropped and counted, not queued: the host would run a
// rule whose calls fail, the connection not ready, with nothing to redo
// them; its resync after EventConnected covers the key. Once the client is
// ready, notifications are delivered.
func TestNotificationBeforeReadyIsDropped(t *testing.T) {
	c, err := newClient(context.Background(), Config{ClientID: "early", Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cancel(ErrClosed)
	defer c.events.close()
	early := localNotify("early", []byte("k"), []byte("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nold\r\n"), "001795000000000:00001:StateStore", "")
	c.handleNotify(early)
	if st := c.Stats(); st.NotificationsEarly != 1 || st.Notifications != 0 {
		t.Fatalf("before ready: %+v, want one early notification, none delivered", st)
	}
	c.mu.Lock()
	c.ready = &conn{}
	c.mu.Unlock()
	c.handleNotify(localNotify("early", []byte("k"), []byte("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$3\r\nnew\r\n"), "001795000000001:00001:StateStore", ""))
	select {
	case ev := <-c.Events():
		if ev.Kind != EventNotify || string(ev.Value) != "new" {
			t.Fatalf("after ready: %+v, want the new notification only", ev)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no event after the client was ready")
	}
}
