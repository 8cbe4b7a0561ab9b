package admin_test

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
)

// hostileServer serves /status (a fixed document) and the console on a
// 127.0.0.1 listener of a server configured for addr with token.
func hostileServer(t *testing.T, addr, token string, failures int) string {
	t.Helper()
	base, err := serveConfig(t, admin.Config{Addr: addr, Token: token, AuthFailures: failures}, func(srv *admin.Server) {
		srv.Handle("GET /status", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"rules":[]}`) }))
		admin.NewConsole(admin.ConsoleConfig{}).Register(srv, func() admin.ConsoleSource { return nil }, func() admin.KeySource { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimPrefix(base, "http://")
}

// do sends req (never following a redirect) and returns its status and
// the error of its JSON body, if any.
func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc admin.ErrorDoc
	if strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") {
		_ = json.NewDecoder(res.Body).Decode(&doc)
	}
	return res.StatusCode, doc.Error
}

// DNS rebinding: a page of evil.example whose name came to resolve to
// 127.0.0.1 sends its requests to the loopback endpoint with Host
// evil.example; the endpoint on loopback answers only requests for
// localhost or an IP address, token or not. The requests all go to the
// 127.0.0.1 listener, the Host header alone forged.
func TestAdminLoopbackRefusesForeignHost(t *testing.T) {
	for _, token := range []string{"", "0123456789abcdef-rebind"} {
		addr := hostileServer(t, "127.0.0.1:0", token, 0)
		_, port, _ := net.SplitHostPort(addr)
		get := func(host, path string) (int, string) {
			t.Helper()
			req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
			req.Host = host
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			return do(t, req)
		}
		for _, host := range []string{"evil.example:" + port, "evil.example", "127.0.0.1.evil.example:" + port, "localhost.evil.example:" + port} {
			for _, path := range []string{"/status", "/console/api/events", "/metrics", "/healthz"} {
				code, msg := get(host, path)
				if code != http.StatusForbidden || !strings.Contains(msg, "Host") || !strings.Contains(msg, "localhost") {
					t.Errorf("token %v: GET %s with Host %s: %d %q, want 403 naming the Host header", token != "", path, host, code, msg)
				}
			}
		}
		for _, host := range []string{addr, "localhost:" + port, "LocalHost", "app.localhost:" + port, "[::1]:" + port, "10.0.0.7:" + port, "127.0.0.1"} {
			if code, msg := get(host, "/status"); code != http.StatusOK {
				t.Errorf("token %v: GET /status with Host %s: %d %q, want 200", token != "", host, code, msg)
			}
		}
	}
	// Off loopback the endpoint is reached by names of the operator's:
	// any Host is served (the token guards it).
	const token = "0123456789abcdef-offloop"
	addr := hostileServer(t, "192.0.2.10:8080", token, 0)
	req, _ := http.NewRequest("GET", "http://"+addr+"/status", nil)
	req.Host = "admin.example:8080"
	req.Header.Set("Authorization", "Bearer "+token)
	if code, msg := do(t, req); code != http.StatusOK {
		t.Errorf("off loopback, GET /status with Host admin.example: %d %q, want 200", code, msg)
	}
}

// A page of another site cannot post the login form to the endpoint from
// its visitor's browser (a simple cross-site form POST: the browser sends
// it with Origin and Sec-Fetch-Site): such a post is refused before its
// token is looked at, so it neither sets a cookie nor counts against the
// visitor's address, whose operator would else be locked out (429).
func TestAdminLoginRefusesCrossSite(t *testing.T) {
	const token = "0123456789abcdef-csrf"
	addr := hostileServer(t, "127.0.0.1:0", token, 3)
	login := func(tok string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+addr+"/console/login", strings.NewReader(url.Values{"token": {tok}, "next": {"/"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return do(t, req)
	}
	for _, hdr := range []map[string]string{
		{"Origin": "http://evil.example", "Sec-Fetch-Site": "cross-site"},
		{"Origin": "http://evil.example"}, // an older browser
		{"Sec-Fetch-Site": "same-site"},   // another port of the same site
		{"Origin": "null"},                // a sandboxed page
	} {
		for range 5 {
			if code, msg := login("wrong-token-wrong-token", hdr); code != http.StatusForbidden || !strings.Contains(msg, "cross-origin") {
				t.Fatalf("a cross-site login %v: %d %q, want 403", hdr, code, msg)
			}
		}
		if code, msg := login(token, hdr); code != http.StatusForbidden {
			t.Fatalf("a cross-site login with the right token %v: %d %q, want 403", hdr, code, msg)
		}
	}
	// The operator's own form (same origin), and a program's post
	// (neither header), still log in: the cross-site posts did not count.
	if code, msg := login(token, map[string]string{"Origin": "http://" + addr, "Sec-Fetch-Site": "same-origin"}); code != http.StatusSeeOther {
		t.Fatalf("the operator's login after cross-site posts: %d %q, want 303", code, msg)
	}
	if code, msg := login(token, nil); code != http.StatusSeeOther {
		t.Fatalf("a program's login: %d %q, want 303", code, msg)
	}
}

// A key page asked for without a key is the request's fault (400 naming
// the parameter), not the store's (502), on both consoles.
func TestConsoleKeyWithoutKey(t *testing.T) {
	b := brokertest.Start(t)
	brokerBase, err := brokerConsole(t, b, "127.0.0.1:0", "")
	if err != nil {
		t.Fatal(err)
	}
	r := newConsoleRig(t, map[string]string{"noop.lua": `local ss = require("ssrun"); ss.watch("x"); function on_event(ev) end`}, host.Config{})
	rulesBase, err := serveWith(t, "127.0.0.1:0", "", func(srv *admin.Server) {
		r.console.Register(srv, func() admin.ConsoleSource { return r.host }, func() admin.KeySource { return r.user })
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, base := range []string{brokerBase, rulesBase} {
		for _, q := range []string{"", "?key=", "?other=k"} {
			code, body := fetch(t, base+"/console/api/key"+q, "")
			if code != http.StatusBadRequest || !strings.Contains(body, "key=KEY") {
				t.Errorf("%s/console/api/key%s: %d %s, want 400 naming the parameter", base, q, code, body)
			}
		}
	}
}

// A page of another site cannot make its visitor's browser use the
// endpoint on its behalf (Fetch Metadata: Sec-Fetch-Site cross-site or
// same-site): it could not read the answers, but it could hold the live
// streams (32 in all, through as many names of loopback as *.localhost
// offers) or have the store scanned again and again. Such requests get
// 403 without a stream opened; a link to the console (a navigation) still
// opens it, and the console's own requests (same-origin) and programs'
// (no such header) are served.
func TestAdminRefusesCrossSiteRequests(t *testing.T) {
	c, base := consoleServer(t, admin.ConsoleConfig{}, "127.0.0.1:0", "")
	get := func(path string, hdr map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		return do(t, req)
	}
	for _, site := range []string{"cross-site", "same-site"} {
		for _, mode := range []string{"cors", "no-cors"} {
			for _, path := range []string{"/console/api/stream", "/console/api/events", "/console/api/keys", "/whynot?key=k&rule=r", "/console/app.js"} {
				code, msg := get(path, map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": mode, "Sec-Fetch-Dest": "empty"})
				if code != http.StatusForbidden || !strings.Contains(msg, "another site") {
					t.Errorf("GET %s %s %s: %d %q, want 403", path, site, mode, code, msg)
				}
			}
		}
		if code, msg := get("/", map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "navigate", "Sec-Fetch-Dest": "document"}); code != http.StatusOK {
			t.Errorf("a link from another site to the console: %d %q, want 200", code, msg)
		}
	}
	if n, _ := c.Streams(); n != 0 {
		t.Errorf("%d streams opened by cross-site requests", n)
	}
	for _, site := range []string{"same-origin", "none", ""} {
		if code, msg := get("/console/api/events", map[string]string{"Sec-Fetch-Site": site, "Sec-Fetch-Mode": "cors"}); code != http.StatusOK {
			t.Errorf("GET /console/api/events, Sec-Fetch-Site %q: %d %q, want 200", site, code, msg)
		}
	}
}
