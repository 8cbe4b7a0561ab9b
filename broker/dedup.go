package broker

import (
	"container/list"
	"hash/maphash"
	"sync"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/ssrun/ssrun/store"
)

// This file is the redelivery cache (statestore-protocol.md §4.7): a request
// delivered twice (a QoS 1 retry after a lost PUBACK, a session resumed with
// the request in flight) is answered with the first reply instead of running
// again, so a retried `SET NX` does not answer `:-1` to its own write.
//
// Only a true redelivery is replayed: the same client, the same correlation
// data and response topic, and the identical request (payload and every user
// property: __ts, __ft, aio-persistence...). A different request that reuses
// a correlation id, from the same client or another, runs; a client cannot
// pre-empt another's request or be answered for a command it did not send.

// Limits of the redelivery cache.
const (
	dedupDefaultTTL = 60 * time.Second // requests without a message expiry
	dedupMaxEntries = 16384
	dedupMaxBytes   = 32 << 20 // cached reply payloads and keys
)

// dedupKey names a request the way its sender can repeat it.
type dedupKey struct{ client, corr, topic string }

// dedupSeed keys the request fingerprints; it is per process, so a client
// cannot craft two different requests with the same fingerprint.
var dedupSeed = maphash.MakeSeed()

// fingerprint identifies the content of a request: its payload and its user
// properties in order.
func fingerprint(pk *packets.Packet) uint64 {
	var h maphash.Hash
	h.SetSeed(dedupSeed)
	_, _ = h.Write(pk.Payload)
	for _, p := range pk.Properties.User {
		_ = h.WriteByte(0)
		_, _ = h.WriteString(p.Key)
		_ = h.WriteByte(0)
		_, _ = h.WriteString(p.Val)
	}
	return h.Sum64()
}

type dedupEntry struct {
	key     dedupKey
	fp      uint64        // fingerprint of the request
	done    chan struct{} // closed once reply is set
	reply   store.Reply
	size    int // bytes counted for this entry
	expires time.Time
	elem    *list.Element
}

// dedupCache remembers the reply to each request until its message expiry,
// bounded in entries and bytes (oldest evicted first).
type dedupCache struct {
	mu    sync.Mutex
	m     map[dedupKey]*dedupEntry
	order list.List // of *dedupEntry, oldest first
	bytes int
}

// begin returns the live entry for (k, fp); first=true means the caller must
// execute the request and call finish. A live entry under k with another
// fingerprint is a different request: it is replaced.
func (c *dedupCache) begin(k dedupKey, fp uint64, now time.Time, ttl time.Duration) (e *dedupEntry, first bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[dedupKey]*dedupEntry)
	}
	if e := c.m[k]; e != nil && now.Before(e.expires) && e.fp == fp {
		return e, false
	}
	if old := c.m[k]; old != nil {
		c.removeLocked(old)
	}
	c.evictLocked(now)
	e = &dedupEntry{key: k, fp: fp, done: make(chan struct{}), expires: now.Add(ttl)}
	e.size = len(k.client) + len(k.corr) + len(k.topic)
	c.bytes += e.size
	e.elem = c.order.PushBack(e)
	c.m[k] = e
	return e, true
}

// finish records the reply of e and releases the redeliveries waiting for it.
func (e *dedupEntry) finish(r store.Reply, c *dedupCache) {
	c.mu.Lock()
	e.reply = r
	if e.elem != nil {
		e.size += len(r.Payload)
		c.bytes += len(r.Payload)
	}
	c.mu.Unlock()
	close(e.done)
}

// evictLocked drops expired entries from the front and the oldest entries
// while over a bound.
func (c *dedupCache) evictLocked(now time.Time) {
	for f := c.order.Front(); f != nil; f = c.order.Front() {
		e := f.Value.(*dedupEntry)
		if now.Before(e.expires) && c.order.Len() < dedupMaxEntries && c.bytes <= dedupMaxBytes {
			return
		}
		c.removeLocked(e)
	}
}

func (c *dedupCache) removeLocked(e *dedupEntry) {
	if e.elem == nil {
		return
	}
	c.order.Remove(e.elem)
	e.elem = nil
	c.bytes -= e.size
	if c.m[e.key] == e {
		delete(c.m, e.key)
	}
}
