package patternwatch

import (
	"context"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/patterns"
	"github.com/ssrun/ssrun/host/internal/watch"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
)

// registry is a Registry that registers nothing.
type registry struct{}

func (registry) WatchRead(context.Context, watch.Watcher, string) (protocol.GetResult, bool, error) {
	return protocol.GetResult{}, false, nil
}
func (registry) WatchKnown(context.Context, watch.Watcher, string, protocol.GetResult) error {
	return nil
}
func (registry) Unwatch(context.Context, watch.Watcher, string) {}

type lineages struct{}

func (lineages) Lookup(string, string, abi.Op) provenance.Lineage { return provenance.Lineage{} }

// queue is the rule's mailbox and its owner: it keeps what either queues.
type queue struct {
	mu  sync.Mutex
	got []abi.Event
}

func (q *queue) PushAlways(d mailbox.Delivery) { q.Enqueue(d) }
func (q *queue) Enqueue(d mailbox.Delivery) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.got = append(q.got, d.Ev)
}
func (q *queue) Settings() Settings {
	return Settings{MaxWatchedKeys: 100, Readable: func(string) bool { return true }}
}
func (q *queue) WatchesExactly(string) bool { return false }
func (q *queue) NoteError(string)           {}

// A deletion queued for a rule through its pattern reaches it even when a
// scan releases the key before the rule takes the event: whether the
// deletion was queued by a notification (a reconnection's resync) or by
// the scan itself. (The host skipped such an event as unwatched: the rule
// never heard the key was gone; TestPatternWatchAfterReconnect failed
// now and then on it.)
func TestDeletionQueuedBeforeTheScanReleasesItsKeyIsDelivered(t *testing.T) {
	for _, notified := range []bool{true, false} {
		name := map[bool]string{true: "notified", false: "found by the scan"}[notified]
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			h := newHub(t, "k/1", "k/2")
			q := &queue{}
			rp := NewRule(h, registry{}, lineages{}, "/rules/r.lua", "r.lua", q, nil, q)
			pat, err := patterns.Compile("k/*")
			if err != nil {
				t.Fatal(err)
			}
			res, err := h.client.Get(ctx, []byte("k/2"), protocol.CallOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rp.live["k/*"] = Watch{Pat: pat}
			rp.keys["k/1"], rp.keys["k/2"] = struct{}{}, struct{}{}
			rp.seen["k/2"] = seenKey{version: res.Version.String(), present: true, n: 1}
			if _, err := h.client.(*protocol.Client).Del(ctx, []byte("k/2"), protocol.DelOptions{}); err != nil {
				t.Fatal(err)
			}
			if notified {
				rp.sink.Enqueue(mailbox.Delivery{Ev: abi.Event{Key: "k/2", Op: abi.OpDelete, Resync: true}})
			}
			rp.found(ctx, "k/*", []string{"k/1"}, true, false) // the rescan: k/2 is gone
			if len(q.got) != 1 || q.got[0].Key != "k/2" || q.got[0].Op != abi.OpDelete {
				t.Fatalf("queued %+v, want one deletion of k/2", q.got)
			}
			if _, ok := rp.Covers("k/2"); ok {
				t.Error("k/2 still covered after the scan released it")
			}
			if _, ok := rp.Gets(q.got[0]); !ok {
				t.Error("the deletion queued for k/2 is no longer the rule's: it would be skipped as unwatched")
			}
			if _, ok := rp.Gets(abi.Event{Key: "k/2", Op: abi.OpSet}); ok {
				t.Error("a change of the released key is the rule's")
			}
			if _, ok := rp.Gets(abi.Event{Key: "j/2", Op: abi.OpDelete}); ok {
				t.Error("the deletion of a key no pattern matches is the rule's")
			}
		})
	}
}
