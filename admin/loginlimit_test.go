package admin_test

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/internal/testutil"
)

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// After 10 wrong tokens from an address within a minute (bearer tokens,
// cookies and login forms alike), every request of it that needs the
// token gets 429 with Retry-After, the right token too, until the minute
// of the first failure ends; requests carrying no token do not count.
func TestAdminWrongTokensLimited(t *testing.T) {
	const token = "0123456789abcdef-limit"
	clock := &fakeClock{t: time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Listener: ln, Token: token, Now: clock.Now, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	admin.RegisterBrokerConsole(srv, func() admin.BrokerSource { return nil })
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "admin server", srv.Close)
	base := "http://" + srv.Addr()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(req *http.Request) (int, string) {
		t.Helper()
		res, err := noRedirect.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode, res.Header.Get("Retry-After")
	}
	get := func(auth string, cookie *http.Cookie) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/console/api/pages", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if cookie != nil {
			req.AddCookie(cookie)
		}
		return do(req)
	}
	login := func(tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest("POST", base+"/console/login", strings.NewReader(url.Values{"token": {tok}, "next": {"/"}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		return do(req)
	}

	for range 20 {
		if code, _ := get("", nil); code != http.StatusUnauthorized {
			t.Fatalf("without a token: %d, want 401", code)
		}
	}
	if code, _ := get("Bearer "+token, nil); code != http.StatusOK {
		t.Fatalf("the token after 20 requests without one: %d, want 200 (they are no failures)", code)
	}
	wrong := []func() (int, string){
		func() (int, string) { return get("Bearer wrong-token-wrong-token", nil) },
		func() (int, string) { return get("", &http.Cookie{Name: "ssrun_admin_token", Value: "wrong-cookie"}) },
		func() (int, string) { return login("wrong-login-token") },
	}
	// A wrong cookie is dropped: the browser stops sending it.
	req, _ := http.NewRequest("GET", base+"/console/api/pages", nil)
	req.AddCookie(&http.Cookie{Name: "ssrun_admin_token", Value: "stale-cookie"})
	res, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if cs := res.Cookies(); res.StatusCode != http.StatusUnauthorized || len(cs) != 1 || cs[0].Name != "ssrun_admin_token" || cs[0].MaxAge >= 0 {
		t.Errorf("a stale cookie: %d, cookies %v; want 401 and the cookie dropped", res.StatusCode, cs)
	}
	clock.add(time.Minute) // that failure's window ends
	for i := range 10 {
		if code, _ := wrong[i%3](); code != http.StatusUnauthorized {
			t.Fatalf("wrong token %d: %d, want 401", i+1, code)
		}
		clock.add(time.Second)
	}
	// 10 failures in 10 s: blocked until 60 s after the first.
	for name, try := range map[string]func() (int, string){
		"bearer": func() (int, string) { return get("Bearer "+token, nil) },
		"login":  func() (int, string) { return login(token) },
		"wrong":  wrong[0],
	} {
		if code, after := try(); code != http.StatusTooManyRequests || after != "50" {
			t.Errorf("%s after 10 wrong tokens: %d Retry-After %q, want 429 and 50", name, code, after)
		}
	}
	clock.add(49 * time.Second)
	if code, after := get("Bearer "+token, nil); code != http.StatusTooManyRequests || after != "1" {
		t.Errorf("59 s after the first failure: %d Retry-After %q, want 429 and 1", code, after)
	}
	clock.add(time.Second)
	if code, _ := get("Bearer "+token, nil); code != http.StatusOK {
		t.Errorf("a minute after the first failure: %d, want 200", code)
	}
	if code, _ := login(token); code != http.StatusSeeOther {
		t.Errorf("login a minute after the first failure: %d, want 303", code)
	}
	// A new window: 9 failures leave the token working, the 10th blocks.
	for range 9 {
		wrong[0]()
	}
	if code, _ := get("Bearer "+token, nil); code != http.StatusOK {
		t.Errorf("after 9 wrong tokens: %d, want 200", code)
	}
	wrong[0]()
	if code, _ := get("Bearer "+token, nil); code != http.StatusTooManyRequests {
		t.Errorf("after 10 wrong tokens: %d, want 429", code)
	}
}
