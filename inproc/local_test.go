package inproc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// A connection to the in-process store queues each change's notification
// at once, and ends and comes back as one to a broker does: EventDisconnected, calls failing with ErrNotConnected, the
// registrations gone in the store; then EventConnected once the client has
// registered its watched keys again.
func TestLocalDownAndUp(t *testing.T) {
	clk := testutil.NewClock(time.Now())
	dial := backends[0].start(t, clk, -1)
	watcher, writer := dial("watcher"), dial("writer")
	if err := watcher.KeyNotify(ctx, []byte("k"), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clk: clk}
	// A change's notification is queued before the writer's call returns,
	// and EventsQueued counts it: what tells a reader that counts the
	// events it handled that none is in flight (a serial host).
	queued := watcher.EventsQueued()
	_, _ = w.set(writer, "k", "before", protocol.SetOptions{})
	_, _ = w.set(writer, "other", "x", protocol.SetOptions{}) // not watched
	if got := watcher.EventsQueued(); queued == 0 || got != queued+1 {
		t.Fatalf("EventsQueued %d after one watched change, was %d (EventConnected counted)", got, queued)
	}
	if got := w.note(watcher); got != "k SET before" {
		t.Fatalf("before going down: %s", got)
	}
	next := func(kind protocol.EventKind) protocol.Event {
		t.Helper()
		for {
			select {
			case ev := <-watcher.Events():
				if ev.Kind == kind {
					return ev
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("no event of kind %v", kind)
			}
		}
	}
	down := errors.New("the store went away")
	watcher.LocalDown(down)
	if ev := next(protocol.EventDisconnected); !errors.Is(ev.Err, down) {
		t.Fatalf("EventDisconnected carries %v, want %v", ev.Err, down)
	}
	if _, err := watcher.Get(ctx, []byte("k"), protocol.CallOptions{}); !errors.Is(err, protocol.ErrNotConnected) {
		t.Fatalf("GET while down: %v", err)
	}
	_, _ = w.set(writer, "k", "while down", protocol.SetOptions{}) // no notification: not registered
	if err := watcher.LocalUp(); err != nil {
		t.Fatal(err)
	}
	next(protocol.EventConnected)
	_, _ = w.set(writer, "k", "after", protocol.SetOptions{})
	if got := w.note(watcher); got != "k SET after" {
		t.Fatalf("after LocalUp: %s, want the change made after it only", got)
	}
}
