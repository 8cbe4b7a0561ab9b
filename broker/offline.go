package broker

import (
	"container/list"
	"log/slog"
	"sync"
)

// This file bounds what sessions without a connection hold, together. A
// session outlives its connection (up to Config.MaxSessionExpiry), and its
// outbox keeps the replies and notifications queued or unacknowledged for a
// connection that resumes it, each outbox within its own bound
// (Config.ClientQueueBytes). Many client ids that send requests and leave
// without acknowledging would each keep that much for the whole session
// expiry; past Config.OfflineQueueBytes in all, the outboxes of the
// sessions disconnected longest are emptied, logged and counted (a client
// that resumes one finds its pending calls unanswered, as after an
// overflow).

// DefaultOfflineQueueBytes is the bound used when Config.OfflineQueueBytes
// is zero.
const DefaultOfflineQueueBytes = 64 << 20

// offlineOutboxes is the set of outboxes of sessions without a connection,
// oldest first, and the bytes they hold.
type offlineOutboxes struct {
	max int
	log *slog.Logger

	mu    sync.Mutex
	total int
	order list.List // of *outbox, disconnected longest first
	elems map[*outbox]*offlineEntry
}

type offlineEntry struct {
	elem  *list.Element
	bytes int
}

func newOfflineOutboxes(max int, log *slog.Logger) *offlineOutboxes {
	return &offlineOutboxes{max: max, log: log, elems: map[*outbox]*offlineEntry{}}
}

// set records that o, without a connection, holds bytes (o.mu held). It
// returns the outboxes to empty to get back under the bound, oldest first:
// the caller empties them (outbox.evict) once it has released o.mu.
func (f *offlineOutboxes) set(o *outbox, bytes int) []*outbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	e := f.elems[o]
	if e == nil {
		e = &offlineEntry{elem: f.order.PushBack(o)}
		f.elems[o] = e
	}
	f.total += bytes - e.bytes
	e.bytes = bytes
	if f.total <= f.max {
		return nil
	}
	var victims []*outbox
	over := f.total - f.max
	for el := f.order.Front(); el != nil && over > 0; el = el.Next() {
		v := el.Value.(*outbox)
		victims = append(victims, v)
		over -= f.elems[v].bytes
	}
	return victims
}

// remove forgets o (o.mu held): it has a connection again, or ended.
func (f *offlineOutboxes) remove(o *outbox) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if e := f.elems[o]; e != nil {
		f.total -= e.bytes
		f.order.Remove(e.elem)
		delete(f.elems, o)
	}
}

// held returns the bytes held by sessions without a connection.
func (f *offlineOutboxes) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.total
}
