package protocol

import (
	"context"
	"errors"
	"fmt"

	"github.com/eclipse/paho.golang/paho"

	"github.com/ssrun/ssrun/protocol/wire"
)

// This file is a Client's other way to a state store: one in the same
// process (package inproc serves package store's), used by ssrun test,
// replay and dry runs so that they run the same host on the same client
// code as production. Everything but the transport is shared: requests are
// built, and replies and notifications decoded, as the MQTT ones (the
// messages are made up as the broker would send them and go through the
// same decoding), the clock, KEYNOTIFY re-registration after a reconnect,
// events and statistics. The connection is up from NewLocal on; LocalDown
// and LocalUp end it and open a new one, as a broker restart would.

// Local is a state store in the same process.
type Local interface {
	// Open starts a connection of clientID. notify receives the
	// notifications of the keys it registers (the §13.3 payload, its __ts
	// and __srcId) until Close; it is called with the store's lock held
	// and must not block.
	Open(clientID string, notify func(key, payload []byte, ts, src string)) (LocalConn, error)
}

// LocalConn is one connection to a Local store.
type LocalConn interface {
	// Do executes one request (a RESP3 payload and its __ts and __ft, ""
	// when absent) and returns the reply payload and its __ts ("" for
	// none).
	Do(payload []byte, ts, ft string) (reply []byte, version string)
	// MaxPacketSize is the largest request it takes, as a broker's CONNACK
	// announces it (0: no limit).
	MaxPacketSize() int
	// Close ends the connection: its registrations are dropped.
	Close()
}

// NewLocal returns a client of the store l, connected at once (Events
// starts with EventConnected). Config's Servers, TLS, KeepAlive,
// CleanStart, SessionExpiry, Credentials and ReconnectBackoff do not apply.
func NewLocal(ctx context.Context, cfg Config, l Local) (*Client, error) {
	c, err := newClient(ctx, cfg)
	if err != nil {
		return nil, err
	}
	c.local = l
	go func() {
		<-c.ctx.Done()
		c.mu.Lock()
		cn := c.up
		c.mu.Unlock()
		if cn != nil {
			cn.local.Close()
		}
		c.wg.Wait()
		c.events.close()
		close(c.done)
	}()
	if err := c.LocalUp(); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// LocalUp opens a new connection to the Local store of a client made by
// NewLocal, when it has none: the client re-registers its watched keys,
// then emits EventConnected.
func (c *Client) LocalUp() error {
	if c.local == nil {
		return errors.New("protocol: LocalUp: not a client of an in-process store")
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	cn := &conn{ctx: ctx, cancel: cancel}
	lc, err := c.local.Open(c.clientID, func(key, payload []byte, ts, src string) {
		c.handleNotify(localNotify(c.clientID, key, payload, ts, src))
	})
	if err != nil {
		cancel(err)
		return fmt.Errorf("protocol: open the in-process store: %w", err)
	}
	cn.local, cn.maxPacket = lc, lc.MaxPacketSize()
	c.mu.Lock()
	if c.up != nil {
		c.mu.Unlock()
		lc.Close()
		cancel(nil)
		return nil
	}
	c.up = cn
	c.lastCause = nil
	c.mu.Unlock()
	c.setup(cn)
	return nil
}

// LocalDown ends the connection of a client made by NewLocal, as a broker
// going away would: its registrations are dropped, pending and later calls
// fail (ErrConnectionLost, then ErrNotConnected) and EventDisconnected
// carries cause, until LocalUp.
func (c *Client) LocalDown(cause error) {
	c.mu.Lock()
	cn := c.up
	c.lastCause = cause
	c.mu.Unlock()
	if cn == nil {
		return
	}
	c.onConnectionDown()
	cn.local.Close()
}

// localNotify is the notification PUBLISH a broker would deliver.
func localNotify(clientID string, key, payload []byte, ts, src string) *paho.Publish {
	user := paho.UserProperties{{Key: wire.PropTimestamp, Value: ts}, {Key: wire.PropProtVer, Value: wire.ProtocolVersion}}
	if src != "" {
		user = append(user, paho.UserProperty{Key: wire.PropSourceID, Value: src})
	}
	return &paho.Publish{QoS: 1, Topic: wire.NotifyTopic(clientID, key), Payload: payload,
		Properties: &paho.PublishProperties{ContentType: wire.ContentType, User: user}}
}

// localResponse is the response properties a broker would send.
func localResponse(version string) *paho.PublishProperties {
	user := paho.UserProperties{{Key: wire.PropStatus, Value: wire.StatusOK}, {Key: wire.PropProtVer, Value: wire.ProtocolVersion}}
	if version != "" {
		user = append(user, paho.UserProperty{Key: wire.PropTimestamp, Value: version})
	}
	return &paho.PublishProperties{ContentType: wire.ContentType, User: user}
}
