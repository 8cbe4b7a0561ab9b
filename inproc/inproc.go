// Package inproc serves a state store in the same process to ssrun's store
// client: protocol.NewLocal(ctx, cfg, inproc.New(s)) is a *protocol.Client
// of the *store.Store s, with everything but the transport as over MQTT.
// ssrun test, replay and dry runs run the real host on such a client, with
// the store and the client on a virtual clock when their Now is one.
package inproc

import (
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/store"
)

// Server is a store served in process; it implements protocol.Local.
type Server struct {
	s *store.Store
}

// New serves s.
func New(s *store.Store) *Server { return &Server{s: s} }

// Store returns the store served.
func (sv *Server) Store() *store.Store { return sv.s }

// Open implements protocol.Local: one connection of clientID, whose
// KEYNOTIFY registrations notify.
func (sv *Server) Open(clientID string, notify func(key, payload []byte, ts, src string)) (protocol.LocalConn, error) {
	return &conn{s: sv.s, id: clientID, notify: notify}, nil
}

// conn is one connection; it owns its registrations (store.Observer), as a
// connection to the broker does.
type conn struct {
	s      *store.Store
	id     string
	notify func(key, payload []byte, ts, src string)
}

func (c *conn) ClientID() string { return c.id }

func (c *conn) Notify(n store.Notification) {
	c.notify(n.Key, n.Payload(), n.Version.String(), n.Src)
}

// Do executes one request as the broker would for this connection.
func (c *conn) Do(payload []byte, ts, ft string) ([]byte, string) {
	req := store.Request{Payload: payload, ClientID: c.id, Observer: func() store.Observer { return c }}
	if ts != "" {
		req.TS = &ts
	}
	if ft != "" {
		req.FT = &ft
	}
	r := c.s.Execute(req)
	if !r.HasVersion {
		return r.Payload, ""
	}
	return r.Payload, r.Version.String()
}

// MaxPacketSize is the embedded broker's: the largest request the store
// takes.
func (c *conn) MaxPacketSize() int { return store.MaxRequest }

// Close drops the connection's registrations.
func (c *conn) Close() { c.s.DropObserver(c) }
