package broker

import (
	"errors"
	"sync"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/ssrun/ssrun/store"
)

// This file is the goroutine that writes a session's outbox (outbox.go) to
// the connection attached to it, one message at a time, in order: the
// messages to resend first, then the queue.

// writer writes an outbox to one connection.
type writer struct {
	o    *outbox
	cl   *mqtt.Client
	last uint16 // the last packet id the session used before cl (0: none)

	wake chan struct{} // cap 1: the queue grew or an acknowledgement arrived
	done chan struct{} // closed by stop
	once sync.Once
}

func newWriter(o *outbox, cl *mqtt.Client, last uint16) *writer {
	return &writer{o: o, cl: cl, last: last, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (w *writer) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *writer) stop() { w.once.Do(func() { close(w.done) }) }

// run writes until stopped. It is started by outbox.attach, in the broker's
// wait group.
func (w *writer) run() {
	defer w.o.wg.Done()
	if w.last != 0 {
		// mochi numbers its own messages to cl from 1 again: past the ids
		// the session's messages to resend hold.
		advancePacketID(w.cl, w.last)
	}
	for {
		m := w.o.next(w)
		if m == nil {
			return
		}
		if m.pk != nil {
			w.resend(m)
			continue
		}
		if err := w.o.store.WaitDurable(m.pos, w.done); err != nil {
			if errors.Is(err, store.ErrJournalClosed) { // stopped
				w.o.putBack(m)
				return
			}
			w.o.release(m)
			w.o.drop(m, "change not persisted: "+err.Error())
			continue
		}
		w.write(m)
	}
}

// resend writes again, DUP, a message written on an earlier connection of
// the session and not acknowledged (MQTT-4.4.0-1).
func (w *writer) resend(m *message) {
	pk := *m.pk
	pk.FixedHeader.Dup = true
	w.cl.State.Inflight.DecreaseSendQuota() // atomic; see write
	w.send(m, pk)
}

// write sends m into the client's session: a response only through a
// matching subscription of this client (at its QoS and identifiers), a
// notification whether or not one matches (§13.4).
func (w *writer) write(m *message) {
	out := packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   m.topic,
		Payload:     m.payload,
		Properties:  m.props,
		Created:     time.Now().Unix(),
	}
	if m.props.MessageExpiryInterval > 0 {
		// MQTT-3.3.2-5/6: an expired message is not delivered; the others
		// carry what is left of their interval.
		left := time.Duration(m.props.MessageExpiryInterval)*time.Second - w.o.store.Now().Sub(m.queued)
		if left <= 0 {
			w.o.release(m)
			w.o.drop(m, "message expired before it could be delivered")
			return
		}
		out.Properties.MessageExpiryInterval = uint32((left + time.Second - 1) / time.Second) // rounded up
	}
	subscribed := applySubscription(w.o.srv, w.cl, &out)
	if m.response && !subscribed {
		w.o.release(m)
		return // unsubscribed since the request: nobody is listening
	}
	if out.FixedHeader.Qos == 0 {
		err := w.cl.WritePacket(out)
		w.o.release(m)
		if err != nil {
			w.o.drop(m, "write failed: "+err.Error())
		}
		return
	}
	for tries := 0; ; tries++ {
		id, err := w.cl.NextPacketID() // skips mochi's own messages in flight
		if err != nil || tries > 65535 {
			w.o.release(m)
			w.o.drop(m, "packet ids exhausted")
			return
		}
		out.PacketID = uint16(id)
		taken, stale := w.o.track(w, m, &out)
		if stale {
			return // the connection was replaced; m waits for the next one
		}
		if !taken {
			break
		}
	}
	// mochi's send quota is the client's Receive Maximum less what is in
	// flight to it: the store's messages count, so mochi holds its own back
	// rather than pass the maximum. Only its atomic counter is touched, never
	// its inflight store.
	w.cl.State.Inflight.DecreaseSendQuota()
	w.send(m, out)
}

// send writes pk, a QoS 1 message the outbox tracks as unacknowledged. A
// message too large for the client is dropped (MQTT-3.1.2-25); after any
// other failure the connection is ending and m stays for the next one.
func (w *writer) send(m *message, pk packets.Packet) {
	err := w.cl.WritePacket(pk)
	if errors.Is(err, packets.ErrPacketTooLarge) {
		w.o.untrack(pk.PacketID, m)
		w.cl.State.Inflight.IncreaseSendQuota()
		w.o.drop(m, "larger than the client's maximum packet size")
	}
}
