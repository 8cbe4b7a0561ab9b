package broker_test

import (
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// Stats counts the connected clients and the notifications queued for them.
func TestStatsConnectionsAndNotifications(t *testing.T) {
	b := brokertest.Start(t)
	if n := b.Stats().Connections; n != 0 {
		t.Fatalf("Connections = %d before any client, want 0", n)
	}
	writer := dial(t, b)
	watcher := dial(t, b)
	testutil.WaitFor(t, "2 connections counted", func() bool { return b.Stats().Connections == 2 })
	watcher.keyNotify("k")
	writer.set("k", "1")
	writer.set("k", "2")
	watcher.nextNote()
	watcher.nextNote()
	if n := b.Stats().NotifyQueued; n != 2 {
		t.Fatalf("NotifyQueued = %d after 2 notified changes, want 2", n)
	}
	writer.close()
	testutil.WaitFor(t, "1 connection left", func() bool { return b.Stats().Connections == 1 })
}
