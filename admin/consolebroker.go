package admin

import (
	"context"
	"net/http"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// The console of `ssrun broker --admin`: the same page, script and token
// as the rules' console (consolepages.go), with two pages of its own
// broker: Keys, its store browsed by the store's own SCAN, and Clients,
// the connected MQTT clients. Both only read, and list a bounded number:
// the keys a page at a time (a link to the next), each page at most
// maxScanPages of the store's SCAN pages.

// BrokerSource is what the broker's console shows: a *broker.Broker.
type BrokerSource interface {
	ScanKeys(pattern, token []byte) (keys [][]byte, next []byte, err error)
	GetKey(key []byte) (value []byte, version hlc.HLC, found bool, err error)
	KeyWriter(key []byte) (client string, version hlc.HLC, found bool)
	Clients(max int) ([]broker.ClientInfo, int)
}

// maxClientsListed bounds the clients page.
const maxClientsListed = 500

// maxScanPages bounds the SCAN pages (each at most 1,000 keys, 10,000
// examined) one keys page takes: it stops at maxKeysListed keys or there.
const maxScanPages = 8

// ClientDoc is one client of GET /console/api/clients.
type ClientDoc struct {
	ID               string     `json:"id"`
	Username         string     `json:"username,omitempty"`
	Remote           string     `json:"remote"`
	Since            *time.Time `json:"since,omitempty"`
	SessionExpirySec uint32     `json:"session_expiry_s"`
	Subscriptions    int        `json:"subscriptions"`
	Inflight         int        `json:"inflight"`
	Queued           int        `json:"queued"`
	Registrations    int        `json:"registrations"`
}

// ClientsDoc is GET /console/api/clients.
type ClientsDoc struct {
	Clients []ClientDoc `json:"clients"`
	Total   int         `json:"total"`
	More    bool        `json:"more"` // cut at the bound
}

// RegisterBrokerConsole serves the broker's console on s, behind the
// server's token: src returns the broker once it listens (nil before:
// 503).
func RegisterBrokerConsole(s *Server, src func() BrokerSource) {
	registerShell(s, brokerPages)
	with := func(h func(BrokerSource) http.Handler) http.Handler {
		return whenThere(src, "the broker is not listening yet", h)
	}
	s.Handle("GET /console/api/keys", with(func(b BrokerSource) http.Handler {
		return keysHandler(func(_ context.Context, pattern, token []byte) ([][]byte, []byte, error) {
			return b.ScanKeys(pattern, token)
		}, "this broker")
	}))
	s.Handle("GET /console/api/key", with(brokerKeyHandler))
	s.Handle("GET /console/api/clients", with(clientsHandler))
}

func clientsHandler(b BrokerSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs, total := b.Clients(maxClientsListed)
		doc := ClientsDoc{Clients: make([]ClientDoc, 0, len(cs)), Total: total, More: total > len(cs)}
		for _, c := range cs {
			d := ClientDoc{ID: c.ID, Username: c.Username, Remote: c.Remote, SessionExpirySec: c.SessionExpiry,
				Subscriptions: c.Subscriptions, Inflight: c.Inflight, Queued: c.Queued, Registrations: c.Registrations}
			if !c.Since.IsZero() {
				since := c.Since.UTC()
				d.Since = &since
			}
			doc.Clients = append(doc.Clients, d)
		}
		writeJSON(w, http.StatusOK, doc)
	})
}

// brokerKeyHandler serves a key with the client that wrote it.
func brokerKeyHandler(b BrokerSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		doc, ok := keyDoc(w, r, brokerKeys{b}, key)
		if !ok {
			return
		}
		if client, v, found := b.KeyWriter([]byte(key)); found && doc.Found && v.String() == doc.Version {
			doc.Writer = client // of the version shown, not of a later write
		}
		writeJSON(w, http.StatusOK, doc)
	})
}

// brokerKeys is the KeySource of the broker's own store.
type brokerKeys struct{ b BrokerSource }

// ScanPage is one SCAN page of the broker's store.
func (k brokerKeys) ScanPage(_ context.Context, pattern, token []byte, _ protocol.ScanOptions) ([][]byte, []byte, error) {
	return k.b.ScanKeys(pattern, token)
}

func (k brokerKeys) Get(_ context.Context, key []byte, _ protocol.CallOptions) (protocol.GetResult, error) {
	v, ver, found, err := k.b.GetKey(key)
	return protocol.GetResult{Value: v, Version: ver, Found: found}, err
}
