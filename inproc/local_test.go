package inproc_test

import (
	"errors"
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol"
)

// A connection to the in-process store ends and comes back as one to a
// broker does: EventDisconnected, calls failing with ErrNotConnected, the
// registrations gone in the store; then EventConnected once the client has
// registered its watched keys again.
func TestLocalDownAndUp(t *testing.T) {
	clk := newClock()
	dial := backends[0].start(t, clk, -1)
	watcher, writer := dial("watcher"), dial("writer")
	if err := watcher.KeyNotify(ctx, []byte("k"), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, clk: clk}
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

// A change's notification is queued on the watcher's Events before the
// writer's call returns, and EventsQueued counts it: what lets a reader
// that counts the events it handled know none is in flight.
func TestEventsQueuedBeforeTheWriteReturns(t *testing.T) {
	clk := newClock()
	dial := backends[0].start(t, clk, -1)
	watcher, writer := dial("watcher"), dial("writer")
	if err := watcher.KeyNotify(ctx, []byte("k"), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	before := watcher.EventsQueued()
	if before == 0 {
		t.Fatal("EventsQueued = 0: EventConnected is not counted")
	}
	w := &world{t: t, clk: clk}
	_, _ = w.set(writer, "k", "1", protocol.SetOptions{})
	if got := watcher.EventsQueued(); got != before+1 {
		t.Fatalf("after a SET returned: EventsQueued = %d, want %d", got, before+1)
	}
	_, _ = w.set(writer, "other", "1", protocol.SetOptions{}) // not watched
	if got := watcher.EventsQueued(); got != before+1 {
		t.Fatalf("after a SET of a key not watched: EventsQueued = %d, want %d", got, before+1)
	}
}
