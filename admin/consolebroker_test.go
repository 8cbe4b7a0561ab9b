package admin_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
)

// brokerConsole serves the console of b (nil: not listening yet) on a
// loopback server configured for addr with token.
func brokerConsole(t *testing.T, b *broker.Broker, addr, token string) (string, error) {
	t.Helper()
	return serveWith(t, addr, token, func(srv *admin.Server) {
		admin.RegisterBrokerConsole(srv, func() admin.BrokerSource {
			if b == nil {
				return nil
			}
			return b
		})
	})
}

// getJSON gets url with auth (an Authorization header, or none), decodes
// a 200 answer into v and returns the status.
func getJSON(t *testing.T, url, auth string, v any) int {
	t.Helper()
	code, body := fetch(t, url, auth)
	if code == http.StatusOK && v != nil {
		if err := json.Unmarshal([]byte(body), v); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	return code
}

// The broker's console on a real broker: its keys by pattern (the value as
// text or hex, its version), bounded; its connected clients with their
// registrations; and the pages it has.
func TestBrokerConsole(t *testing.T) {
	b := brokertest.Start(t)
	base, err := brokerConsole(t, b, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	c := protocoltest.Connect(t, protocol.Config{Servers: []string{b.Addr()}, Logger: quiet, ClientID: "<i>console-client</i>"})
	setKey(t, c, "<b>k</b>", "<script>v</script>")
	setKey(t, c, "bin", "\xff\x00\x01")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.KeyNotify(ctx, []byte("<b>k</b>"), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}

	var pages struct{ Pages []string }
	if code := getJSON(t, base+"/console/api/pages", "", &pages); code != 200 || fmt.Sprint(pages.Pages) != "[keys clients]" {
		t.Errorf("pages: %d %v, want the broker's two", code, pages.Pages)
	}
	var keys admin.KeysDoc
	if code := getJSON(t, base+"/console/api/keys", "", &keys); code != 200 || fmt.Sprint(keys.Keys) != "[<b>k</b> bin]" || keys.More {
		t.Errorf("keys: %d %+v", code, keys)
	}
	var k admin.KeyDoc
	getJSON(t, base+"/console/api/key?"+url.Values{"key": {"<b>k</b>"}}.Encode(), "", &k)
	if !k.Found || k.Value != "<script>v</script>" || k.Hex || k.Version == "" || k.LastWrite != nil {
		t.Errorf("key <b>k</b>: %+v", k)
	}
	getJSON(t, base+"/console/api/key?key=bin", "", &k)
	if !k.Found || k.Value != "ff0001" || !k.Hex || k.Size != 3 {
		t.Errorf("key bin: %+v, want it in hex", k)
	}
	getJSON(t, base+"/console/api/key?key=absent", "", &k)
	if k.Found {
		t.Errorf("key absent: %+v", k)
	}

	var cl admin.ClientsDoc
	if code := getJSON(t, base+"/console/api/clients", "", &cl); code != 200 || cl.Total != 1 || len(cl.Clients) != 1 {
		t.Fatalf("clients: %d %+v, want the one", code, cl)
	}
	got := cl.Clients[0]
	if got.ID != "<i>console-client</i>" || got.Remote == "" || got.Since == nil || got.Registrations != 1 || got.Subscriptions < 1 {
		t.Errorf("client: %+v, want its id, address, start, one registration and its response subscription", got)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the client to be gone from the page", func() bool {
		getJSON(t, base+"/console/api/clients", "", &cl)
		return cl.Total == 0 && len(cl.Clients) == 0
	})
}

// The keys page crosses the store's SCAN pages and stops at its bound.
func TestBrokerConsoleKeysBounded(t *testing.T) {
	b := brokertest.Start(t)
	base, err := brokerConsole(t, b, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	c := protocoltest.Connect(t, protocol.Config{Servers: []string{b.Addr()}, Logger: quiet})
	const n = 1100 // more than a SCAN page (1000 keys)
	for i := range n {
		setKey(t, c, fmt.Sprintf("p/%04d", i), "v")
	}
	setKey(t, c, "other", "v")
	seen, pages := map[string]bool{}, 0
	var token []byte
	for {
		ks, next, err := b.ScanKeys([]byte("p/*"), token)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		for _, k := range ks {
			seen[string(k)] = true
		}
		if next == nil {
			break
		}
		token = next
	}
	if len(seen) != n || pages < 2 {
		t.Errorf("ScanKeys p/*: %d keys in %d pages, want %d in at least 2", len(seen), pages, n)
	}
	var keys admin.KeysDoc
	getJSON(t, base+"/console/api/keys?pattern=p/*", "", &keys)
	if len(keys.Keys) != 500 || !keys.More {
		t.Errorf("keys p/*: %d, more %v; want the first 500 and more", len(keys.Keys), keys.More)
	}
	getJSON(t, base+"/console/api/keys?pattern=oth*", "", &keys)
	if fmt.Sprint(keys.Keys) != "[other]" || keys.More {
		t.Errorf("keys oth*: %+v", keys)
	}
	if _, _, err := b.ScanKeys([]byte("p/*"), []byte("1;forged")); err == nil {
		t.Error("a forged SCAN token was taken")
	}
}

// Before the broker listens its pages answer 503; off loopback it needs a
// token, and every page, file and API call without it gets 401.
func TestBrokerConsoleToken(t *testing.T) {
	if _, err := brokerConsole(t, nil, "192.0.2.10:8080", ""); !errors.Is(err, admin.ErrTokenRequired) {
		t.Fatalf("off loopback without a token: %v, want ErrTokenRequired", err)
	}
	const token = "0123456789abcdef-broker"
	base, err := brokerConsole(t, nil, "192.0.2.10:8080", token)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/", "/console/app.js", "/console/style.css", "/console/api/pages", "/console/api/keys", "/console/api/key?key=k", "/console/api/clients"} {
		for _, auth := range []string{"", "Bearer wrong-token-wrong-token"} {
			if code := getJSON(t, base+p, auth, nil); code != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: %d, want 401", p, auth, code)
			}
		}
	}
	if code := getJSON(t, base+"/console/api/pages", "Bearer "+token, nil); code != 200 {
		t.Errorf("pages with the token: %d", code)
	}
	if code := getJSON(t, base+"/console/api/clients", "Bearer "+token, nil); code != http.StatusServiceUnavailable {
		t.Errorf("clients before the broker listens: %d, want 503", code)
	}
}
