package watch

import (
	"log/slog"
	"testing"

	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// countWatcher counts what it is handed.
type countWatcher struct{ n int }

func (w *countWatcher) Enqueue(mailbox.Delivery) { w.n++ }
func (w *countWatcher) WatcherName() string      { return "" }

// A write made between a key's KEYNOTIFY and the registry's read of its
// baseline is seen by that read before its notification reaches the
// dispatcher: the notification must still be delivered (the read delivered
// nothing). A notification of a version a resync delivered is not
// delivered twice. Before, the baseline's version counted as delivered and
// the rule never saw that write.
func TestNotifyOfTheBaselineVersionIsDelivered(t *testing.T) {
	g := New(nil, slog.Default())
	w := &countWatcher{}
	v := hlc.HLC{Wall: 1000, Counter: 1, Node: "n"}
	g.keys["k"] = &keyState{watchers: map[Watcher]bool{w: true}, registered: true,
		known: true, present: true, version: v, read: true} // as baseline leaves it
	ev := protocol.Event{Kind: protocol.EventNotify, Key: []byte("k"), Op: protocol.OpSet, Value: []byte("1"), Version: v}
	if got := g.Notify(ev, nil); len(got) != 1 {
		t.Fatalf("notification of the version the baseline read: %d watchers, want 1", len(got))
	}
	if got := g.Notify(ev, nil); len(got) != 0 {
		t.Fatalf("the same notification again: %d watchers, want 0 (already delivered)", len(got))
	}
}
