package admin

import (
	"context"
	"encoding/base64"
	"iter"
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
	s.Handle("GET /console/api/keys", with(brokerKeysHandler))
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

// brokerKeysHandler serves a page of the store's keys: SCAN pages from
// after= (the previous page's next, the store's token in base64url) until
// it holds maxKeysListed keys, the store's last page or maxScanPages.
func brokerKeysHandler(b BrokerSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pattern, reserved, ok := keysQuery(w, r)
		if !ok {
			return
		}
		var token []byte
		if after := r.URL.Query().Get("after"); after != "" {
			var err error
			if token, err = base64.RawURLEncoding.DecodeString(after); err != nil || len(token) == 0 {
				writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "after= is the next of a keys page"})
				return
			}
		}
		doc := KeysDoc{Pattern: pattern, Keys: []string{}}
		for range maxScanPages {
			keys, next, err := b.ScanKeys([]byte(pattern), token)
			if err != nil && token != nil {
				writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "after= is not a page of " + pattern + " on this broker (restarted since?): " + err.Error()})
				return
			}
			if err != nil {
				writeJSON(w, http.StatusInternalServerError, ErrorDoc{Error: "scan " + pattern + ": " + err.Error()})
				return
			}
			for _, k := range keys {
				doc.add(k, reserved)
			}
			token = next
			if next == nil || len(doc.Keys) >= maxKeysListed {
				break
			}
		}
		if token != nil {
			doc.More, doc.Next = true, base64.RawURLEncoding.EncodeToString(token)
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

// Keys lists the keys of pattern a SCAN page at a time, until ctx ends.
func (k brokerKeys) Keys(ctx context.Context, pattern []byte, _ protocol.ScanOptions) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		var token []byte
		for {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			keys, next, err := k.b.ScanKeys(pattern, token)
			if err != nil {
				yield(nil, err)
				return
			}
			for _, key := range keys {
				if !yield(key, nil) {
					return
				}
			}
			if next == nil {
				return
			}
			token = next
		}
	}
}

func (k brokerKeys) Get(_ context.Context, key []byte, _ protocol.CallOptions) (protocol.GetResult, error) {
	v, ver, found, err := k.b.GetKey(key)
	return protocol.GetResult{Value: v, Version: ver, Found: found}, err
}
