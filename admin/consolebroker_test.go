package admin_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
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
	if !k.Found || k.Value != "<script>v</script>" || k.Hex || k.Version == "" || k.LastWrite != nil || k.Writer != "<i>console-client</i>" {
		t.Errorf("key <b>k</b>: %+v, want its value, version and writer", k)
	}
	other := protocoltest.Connect(t, protocol.Config{Servers: []string{b.Addr()}, Logger: quiet, ClientID: "other-writer"})
	setKey(t, other, "bin", "\xff\x00\x01")
	getJSON(t, base+"/console/api/key?key=bin", "", &k)
	if !k.Found || k.Value != "ff0001" || !k.Hex || k.Size != 3 || k.Writer != "other-writer" {
		t.Errorf("key bin: %+v, want it in hex, written last by other-writer", k)
	}
	if err := other.Close(); err != nil {
		t.Fatal(err)
	}
	getJSON(t, base+"/console/api/key?key=absent", "", &k)
	if k.Found {
		t.Errorf("key absent: %+v", k)
	}

	var cl admin.ClientsDoc
	testutil.WaitFor(t, "other-writer gone from the clients: the one left", func() bool { // its disconnect reaches the broker after Close returns
		cl = admin.ClientsDoc{}
		return getJSON(t, base+"/console/api/clients", "", &cl) == 200 && cl.Total == 1 && len(cl.Clients) == 1
	})
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

// ScanKeys crosses the store's SCAN pages.
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
	getJSON(t, base+"/console/api/keys?pattern=oth*", "", &keys)
	if fmt.Sprint(keys.Keys) != "[other]" || keys.More || keys.Next != "" {
		t.Errorf("keys oth*: %+v", keys)
	}
	if _, _, err := b.ScanKeys([]byte("p/*"), []byte("1;forged")); err == nil {
		t.Error("a forged SCAN token was taken")
	}
}

// walkKeys follows the keys pages of query from the first to the last by
// their next links, and returns every key listed with how many times, the
// pages, and the $ssrun/ keys hidden.
func walkKeys(t *testing.T, base string, query url.Values) (seen map[string]int, pages, hidden int) {
	t.Helper()
	seen = map[string]int{}
	for {
		var doc admin.KeysDoc
		if code := getJSON(t, base+"/console/api/keys?"+query.Encode(), "", &doc); code != 200 {
			t.Fatalf("keys %v: %d", query, code)
		}
		pages++
		if len(doc.Keys) > 500+1000 {
			t.Errorf("a page of %d keys, want at most 1,500 (stops at 500, after a SCAN page)", len(doc.Keys))
		}
		for _, k := range doc.Keys {
			seen[k]++
		}
		hidden += doc.Hidden
		if doc.More != (doc.Next != "") {
			t.Fatalf("page %d: more %v, next %q", pages, doc.More, doc.Next)
		}
		if doc.Next == "" {
			return seen, pages, hidden
		}
		if pages > 100 {
			t.Fatal("no last page after 100")
		}
		query.Set("after", doc.Next)
	}
}

// The broker's keys page is paged: following its next links reaches every
// key exactly once, the $ssrun/ keys hidden unless asked for; a key made
// of HTML is listed as it is; a forged or stale after= is refused.
func TestBrokerConsoleKeysPaged(t *testing.T) {
	b := brokertest.Start(t)
	base, err := brokerConsole(t, b, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	checkKeysPaged(t, base, protocoltest.Connect(t, protocol.Config{Servers: []string{b.Addr()}, Logger: quiet}))
}

// The host console's Keys page pages the same way, through the host's
// connection (protocol.Client.ScanPage): every key once, the store's
// token in after=, a refused token a 400.
func TestConsoleKeysPaged(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"noop.lua": `local ss = require("ssrun"); ss.watch("x"); function on_event(ev) end`}, host.Config{})
	base, err := serveWith(t, "127.0.0.1:0", "", func(srv *admin.Server) {
		r.console.Register(srv, func() admin.ConsoleSource { return r.host }, func() admin.KeySource { return r.user })
	})
	if err != nil {
		t.Fatal(err)
	}
	checkKeysPaged(t, base, r.user)
}

// checkKeysPaged writes keys through c and walks a console's keys pages
// at base: every key once across the pages ($ssrun/'s hidden, or listed
// with reserved=1), a narrower pattern in one page, and a forged token, a
// token of another pattern and one that is no base64 each a 400.
func checkKeysPaged(t *testing.T, base string, c *protocol.Client) {
	t.Helper()
	const n = 2300 // more than two SCAN pages (1,000 keys each)
	want := map[string]int{}
	for i := range n {
		k := fmt.Sprintf("p/%04d", i)
		setKey(t, c, k, "v")
		want[k] = 1
	}
	for _, k := range []string{"<script>alert(1)</script>", "other"} {
		setKey(t, c, k, "v")
		want[k] = 1
	}
	reserved := []string{"$ssrun/timers/a", "$ssrun/timers/b", "$ssrun/x"}
	for _, k := range reserved {
		setKey(t, c, k, "v")
	}

	seen, pages, hidden := walkKeys(t, base, url.Values{})
	if pages < 3 || hidden != len(reserved) || !maps.Equal(seen, want) {
		t.Errorf("pages of *: %d pages, %d hidden, %d keys (%d wanted), each once: %v; want every key but $ssrun/'s once, in at least 3 pages",
			pages, hidden, len(seen), len(want), maps.Equal(seen, want))
	}
	for _, k := range reserved {
		want[k] = 1
	}
	seen, _, hidden = walkKeys(t, base, url.Values{"reserved": {"1"}})
	if hidden != 0 || !maps.Equal(seen, want) {
		t.Errorf("pages of * with reserved=1: %d hidden, %d keys (%d wanted)", hidden, len(seen), len(want))
	}
	seen, pages, _ = walkKeys(t, base, url.Values{"pattern": {"p/2*"}})
	if len(seen) != 300 || pages != 1 {
		t.Errorf("pages of p/2*: %d keys in %d pages, want 300 in 1", len(seen), pages)
	}

	var first admin.KeysDoc
	getJSON(t, base+"/console/api/keys?pattern=p/*", "", &first)
	for name, q := range map[string]url.Values{
		"forged":          {"pattern": {"p/*"}, "after": {base64.RawURLEncoding.EncodeToString([]byte("1;00000000000000000000000000000000;p/0001"))}},
		"another pattern": {"pattern": {"p*"}, "after": {first.Next}},
		"not base64":      {"pattern": {"p/*"}, "after": {"%%%"}},
	} {
		if code, body := fetch(t, base+"/console/api/keys?"+q.Encode(), ""); code != http.StatusBadRequest {
			t.Errorf("after= %s: %d %s, want 400", name, code, body)
		}
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

// The host console's Keys page leaves out the host's own keys (under
// $ssrun/), counting them, unless reserved=1; a key made of HTML is listed
// as it is.
func TestConsoleKeysHideReserved(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"noop.lua": `local ss = require("ssrun"); ss.watch("x"); function on_event(ev) end`}, host.Config{})
	base, err := serveWith(t, "127.0.0.1:0", "", func(srv *admin.Server) {
		r.console.Register(srv, func() admin.ConsoleSource { return r.host }, func() admin.KeySource { return r.user })
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"a/1", "<script>alert(1)</script>", "$ssrun/timers/t1", "$ssrun/x"} {
		r.set(k, "v")
	}
	var doc admin.KeysDoc
	if code := getJSON(t, base+"/console/api/keys", "", &doc); code != 200 || doc.Hidden != 2 || fmt.Sprint(doc.Keys) != "[<script>alert(1)</script> a/1]" {
		t.Errorf("keys: %d %+v, want the two keys and two hidden", code, doc)
	}
	doc = admin.KeysDoc{}
	if code := getJSON(t, base+"/console/api/keys?reserved=1", "", &doc); code != 200 || doc.Hidden != 0 ||
		fmt.Sprint(doc.Keys) != "[$ssrun/timers/t1 $ssrun/x <script>alert(1)</script> a/1]" {
		t.Errorf("keys with reserved=1: %d %+v, want all four", code, doc)
	}
}
