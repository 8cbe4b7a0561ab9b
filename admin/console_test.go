package admin_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/internal/testutil"
)

// consoleServer serves a console of cfg (no host: the API's host pages
// answer 503) on a loopback server configured for addr with token. Its
// tests send more wrong tokens than the default limit lets through (the
// limit's own test: TestAdminWrongTokensLimited).
func consoleServer(t *testing.T, cfg admin.ConsoleConfig, addr, token string) (*admin.Console, string) {
	t.Helper()
	c := admin.NewConsole(cfg)
	base, err := serveConfig(t, admin.Config{Addr: addr, Token: token, AuthFailures: 1000}, func(srv *admin.Server) {
		c.Register(srv, func() admin.ConsoleSource { return nil }, func() admin.KeySource { return nil })
	})
	if err != nil {
		t.Fatal(err)
	}
	return c, base
}

func run(rule, key string, n int) host.Run {
	return host.Run{Rule: rule, Event: provenance.Cause{Key: key, Op: "SET", Version: fmt.Sprintf("%015d:00001:StateStore", n), Client: "user"}, At: time.Now(), Took: time.Millisecond}
}

// sse reads a stream's events: name and data.
type sse struct {
	body io.ReadCloser
	r    *bufio.Reader
}

func openStream(t *testing.T, base, query string, hdr http.Header) *sse {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/console/api/stream?"+query, nil)
	for k, v := range hdr {
		req.Header[k] = v
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "text/event-stream" {
		res.Body.Close()
		t.Fatalf("stream: %s %s", res.Status, res.Header.Get("Content-Type"))
	}
	t.Cleanup(func() { res.Body.Close() })
	return &sse{body: res.Body, r: bufio.NewReader(res.Body)}
}

// next returns the next event (comments skipped).
func (s *sse) next(t *testing.T) (name, data string) {
	t.Helper()
	for {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatalf("stream ended: %v", err)
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && name != "":
			return name, data
		}
	}
}

func (s *sse) entry(t *testing.T) admin.Entry {
	t.Helper()
	name, data := s.next(t)
	var e admin.Entry
	if err := json.Unmarshal([]byte(data), &e); name != "entry" || err != nil {
		t.Fatalf("event %s %s: %v", name, data, err)
	}
	return e
}

// The stream starts with the recent entries its filter matches, then sends
// each new one that matches, in order, with the run's writes.
func TestConsoleStreamFilters(t *testing.T) {
	c, base := consoleServer(t, admin.ConsoleConfig{}, "127.0.0.1:0", "")
	c.Ran(run("door.lua", "door/front", 1))
	c.Ran(run("alarm.lua", "alarm/state", 2))
	s := openStream(t, base, url.Values{"key": {"door/*"}}.Encode(), nil)
	if e := s.entry(t); e.Rule != "door.lua" || e.Seq != 1 || e.ByClient != "user" || e.Outcome != admin.OutcomeHandled {
		t.Fatalf("backlog: %+v", e)
	}
	testutil.WaitFor(t, "the stream subscribed", func() bool { n, _ := c.Streams(); return n == 1 })
	c.Wrote("door.lua", provenance.Step{Rule: "door.lua", Key: "alarm/state", Op: "SET", Version: "v9"}, provenance.Cause{Key: "door/back", Op: "SET"})
	c.Ran(run("alarm.lua", "door/x", 3)) // the key matches, another rule
	c.Ran(run("door.lua", "door/back", 4))
	c.Ran(run("door.lua", "lights/hall", 5)) // the key does not match
	if e := s.entry(t); e.Seq != 3 {
		t.Fatalf("want entry 3, got %+v", e)
	}
	if e := s.entry(t); e.Seq != 4 || len(e.Writes) != 1 || e.Writes[0].Key != "alarm/state" {
		t.Fatalf("want entry 4 with door.lua's write, got %+v", e)
	}
	s2 := openStream(t, base, url.Values{"rule": {"alarm.lua"}}.Encode(), nil)
	if a, b := s2.entry(t), s2.entry(t); a.Seq != 2 || b.Seq != 3 {
		t.Fatalf("rule filter backlog: %d %d, want 2 3", a.Seq, b.Seq)
	}
}

// Beyond its rate a stream skips entries and says how many: every entry
// is either sent or counted.
func TestConsoleStreamSamples(t *testing.T) {
	c, base := consoleServer(t, admin.ConsoleConfig{ClientRate: 5, ClientBuffer: 1000}, "127.0.0.1:0", "")
	s := openStream(t, base, "", nil)
	testutil.WaitFor(t, "the stream subscribed", func() bool { n, _ := c.Streams(); return n == 1 })
	const n = 100
	for i := range n {
		c.Ran(run("r.lua", "k", i))
	}
	sent, skipped := 0, 0
	for sent+skipped < n {
		name, data := s.next(t)
		switch name {
		case "entry":
			sent++
		case "skipped":
			var v struct{ Skipped int }
			if err := json.Unmarshal([]byte(data), &v); err != nil {
				t.Fatal(err)
			}
			skipped += v.Skipped
		}
	}
	if sent+skipped != n || sent > 10 || skipped == 0 {
		t.Fatalf("sent %d, skipped %d of %d at 5 a second", sent, skipped, n)
	}
}

// A client that stops reading holds at most its buffer, never slows the
// entries' senders, and is cut off once a write has waited the timeout.
func TestConsoleStreamStalledClient(t *testing.T) {
	c, base := consoleServer(t, admin.ConsoleConfig{ClientRate: 1 << 30, ClientBuffer: 16, WriteTimeout: 200 * time.Millisecond}, "127.0.0.1:0", "")
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := fmt.Fprintf(conn, "GET /console/api/stream HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the stream subscribed", func() bool { n, _ := c.Streams(); return n == 1 })
	big := strings.Repeat("k", 64<<10)
	i := 0
	testutil.WaitFor(t, "the stalled stream cut off", func() bool {
		for range 2000 {
			c.Ran(run("r.lua", big, i))
			i++
		}
		n, waiting := c.Streams()
		if waiting > 16 {
			t.Fatalf("%d entries waiting for one stream of buffer 16", waiting)
		}
		return n == 0
	})
	if got := len(c.Recent()); got != admin.DefaultRecent {
		t.Errorf("recent ring holds %d, want its bound %d", got, admin.DefaultRecent)
	}
}

// More streams than the bound are refused.
func TestConsoleStreamLimit(t *testing.T) {
	c, base := consoleServer(t, admin.ConsoleConfig{MaxClients: 1}, "127.0.0.1:0", "")
	openStream(t, base, "", nil)
	testutil.WaitFor(t, "the stream subscribed", func() bool { n, _ := c.Streams(); return n == 1 })
	res, err := http.Get(base + "/console/api/stream")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("a second stream: %s", res.Status)
	}
	res, err = http.Get(base + "/console/api/stream?key=" + url.QueryEscape(strings.Repeat("*", 300)))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Fatalf("a huge filter: %s", res.Status)
	}
}

// Off loopback, every page, file, API call and stream of the console needs
// the token: in the header, or in the cookie the login form sets.
func TestConsoleToken(t *testing.T) {
	const token = "0123456789abcdef-console"
	_, base := consoleServer(t, admin.ConsoleConfig{}, "192.0.2.10:8080", token)
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	get := func(path string, hdr map[string]string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	for _, p := range []string{"/", "/console/app.js", "/console/style.css", "/console/api/events", "/console/api/stream", "/console/api/rules", "/whynot?key=k&rule=r"} {
		if res := get(p, nil); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s without the token: %s", p, res.Status)
		}
		if res := get(p, map[string]string{"Authorization": "Bearer wrong-token-wrong-token"}); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong token: %s", p, res.Status)
		}
		if res := get(p, map[string]string{"Cookie": "ssrun_admin_token=nope"}); res.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s with a wrong cookie: %s", p, res.Status)
		}
	}
	if res := get("/", map[string]string{"Accept": "text/html"}); res.StatusCode != http.StatusUnauthorized || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
		t.Errorf("a browser without the token: %s %s, want 401 and the login form", res.Status, res.Header.Get("Content-Type"))
	}
	if res := get("/", map[string]string{"Authorization": "Bearer " + token}); res.StatusCode != http.StatusOK || res.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("the page with the token: %s, CSP %q", res.Status, res.Header.Get("Content-Security-Policy"))
	}
	if res := get("/console/login.css", nil); res.StatusCode != http.StatusOK {
		t.Errorf("the login form's style: %s", res.Status)
	}

	login := func(tok string) *http.Response {
		t.Helper()
		res, err := noRedirect.PostForm(base+"/console/login", url.Values{"token": {tok}, "next": {"//evil.example/"}})
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res
	}
	if res := login("wrong-token-wrong-token"); res.StatusCode != http.StatusUnauthorized || len(res.Cookies()) != 0 {
		t.Errorf("a wrong login: %s, cookies %v", res.Status, res.Cookies())
	}
	res := login(token)
	if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/" || len(res.Cookies()) != 1 {
		t.Fatalf("a right login: %s to %q, cookies %v", res.Status, res.Header.Get("Location"), res.Cookies())
	}
	ck := res.Cookies()[0]
	if !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Strict", ck)
	}
	for _, p := range []string{"/", "/console/app.js", "/console/api/events"} {
		if res := get(p, map[string]string{"Cookie": ck.Name + "=" + ck.Value}); res.StatusCode != http.StatusOK {
			t.Errorf("%s with the cookie: %s", p, res.Status)
		}
	}
}
