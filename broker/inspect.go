package broker

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/store"
)

// This file lets the broker's admin console look inside, read only: a page
// of the store's keys (its own SCAN), one key's value, and the connected
// clients with what the broker holds for each.

// ScanKeys returns one page of SCAN pattern: the keys it lists and the
// token of the next page (nil on the last one). Token is the previous
// page's, nil for the first.
func (b *Broker) ScanKeys(pattern, token []byte) (keys [][]byte, next []byte, err error) {
	args := [][]byte{[]byte("SCAN"), pattern}
	if token != nil {
		args = append(args, token)
	}
	rep := b.store.Execute(store.Request{Payload: resp.EncodeRequest(args...)})
	if r, err := resp.ParseReply(rep.Payload); err == nil && r.Kind == resp.KindError {
		return nil, nil, fmt.Errorf("scan: %s", r.Str)
	}
	keys, next, _, err = resp.ParseScanReply(rep.Payload)
	return keys, next, err
}

// GetKey returns key's value and version, found false when it is not
// stored.
func (b *Broker) GetKey(key []byte) (value []byte, version hlc.HLC, found bool, err error) {
	rep := b.store.Execute(store.Request{Payload: resp.EncodeRequest([]byte("GET"), key)})
	r, err := resp.ParseReply(rep.Payload)
	switch {
	case err != nil:
		return nil, hlc.HLC{}, false, err
	case r.Kind == resp.KindError:
		return nil, hlc.HLC{}, false, errors.New(string(r.Str))
	case r.Kind == resp.KindNil:
		return nil, hlc.HLC{}, false, nil
	}
	return r.Str, rep.Version, true, nil
}

// KeyWriter returns the client id that last wrote key ("" when unknown:
// written before a restart, or seeded) and the version it wrote; found is
// false when key is not stored.
func (b *Broker) KeyWriter(key []byte) (client string, version hlc.HLC, found bool) {
	return b.store.Writer(key)
}

// ClientInfo is one connected MQTT client as the broker sees it.
type ClientInfo struct {
	ID       string
	Username string
	Remote   string
	Since    time.Time // when its session was established
	// SessionExpiry is its session expiry interval in seconds (0: the
	// session ends with the connection).
	SessionExpiry uint32
	Subscriptions int
	Inflight      int // QoS messages to it not acknowledged yet (mochi's)
	// Queued is what the store holds for its session: replies and
	// notifications not written yet or not acknowledged yet.
	Queued        int
	Registrations int // KEYNOTIFY registrations of its connection
}

// Clients returns at most max of the connected clients, by client id, and
// how many there are.
func (b *Broker) Clients(max int) ([]ClientInfo, int) {
	h := b.hook
	h.mu.Lock()
	type conn struct {
		cl    *mqtt.Client
		since time.Time
		box   *outbox
	}
	conns := make([]conn, 0, len(h.conns))
	for id, cl := range h.conns {
		conns = append(conns, conn{cl, h.since[cl], h.boxes[id]})
	}
	h.mu.Unlock()
	slices.SortFunc(conns, func(a, b conn) int { return cmp.Compare(a.cl.ID, b.cl.ID) })
	total := len(conns)
	if len(conns) > max {
		conns = conns[:max]
	}
	out := make([]ClientInfo, 0, len(conns))
	for _, c := range conns {
		// Its properties are set before its session is established
		// (h.mu orders that before this read) and not written after.
		ci := ClientInfo{ID: c.cl.ID, Username: string(c.cl.Properties.Username), Remote: c.cl.Net.Remote, Since: c.since,
			SessionExpiry: c.cl.Properties.Props.SessionExpiryInterval}
		ci.Subscriptions = c.cl.State.Subscriptions.Len()
		ci.Inflight = c.cl.State.Inflight.Len()
		if c.box != nil {
			c.box.mu.Lock()
			ci.Queued = len(c.box.queue) + len(c.box.resend) + len(c.box.unacked)
			c.box.mu.Unlock()
		}
		ci.Registrations = b.store.RegistrationsOf(ci.ID)
		out = append(out, ci)
	}
	return out, total
}
