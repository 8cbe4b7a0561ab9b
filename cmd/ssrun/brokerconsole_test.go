package main

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
)

// The broker's own console in a headless browser, on the `ssrun broker
// --admin 127.0.0.1:0` binary: a client sets keys made of HTML; the Keys
// page lists them and shows a value and its writer as text, a page at a
// time (next page, first page); the Clients page lists the client; the
// rules' pages are not in its menu.
func TestBrokerConsoleInBrowser(t *testing.T) {
	p := startProc(t, "broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	base := "http://" + waitOutput(t, p.stdout, adminListening)[1]
	brokerAddr := waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	user := protocoltest.Connect(t, protocol.Config{Servers: []string{brokerAddr}, ClientID: "<i>door-sensor</i>"})
	const key = "<b>k</b>"
	userSet(t, user, key, hostileVal)
	userSet(t, user, hostileKey, "v")
	ctx, dialogs := browser(t)

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/keys?pattern=*"), chromedp.WaitVisible(chromedp.CSS("main table"))); err != nil {
		t.Fatalf("keys page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`[...document.querySelectorAll("td")].find((td) => td.textContent === %q).click() === undefined`, key))); err != nil {
		t.Fatalf("the key %s is not listed as text: %v; the page says %q", key, err, text(t, ctx, "main"))
	}
	waitFor(t, ctx, "#key pre")
	detail := text(t, ctx, "#key")
	waitFor(t, ctx, "#writer")
	if v, w := text(t, ctx, "#key pre"), text(t, ctx, "#writer"); v != hostileVal || !strings.Contains(detail, "Key "+key) || w != "<i>door-sensor</i>" {
		t.Errorf("the key's detail: %q (value %q, writer %q), want the key, value and writer as text", detail, v, w)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`[...document.querySelectorAll("td")].some((td) => td.textContent === %q)`, hostileKey))); err != nil {
		t.Errorf("the key %s is not listed as text: %v", hostileKey, err)
	}
	bolds, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("main b, main i, img, main script").length`))
	if err != nil {
		t.Fatal(err)
	}
	if bolds != 0 || dialogs.Load() != 0 {
		t.Errorf("%d elements made of the key or value, %d dialogs; want none", bolds, dialogs.Load())
	}
	nav := text(t, ctx, "#nav")
	if !strings.Contains(nav, "Keys") || !strings.Contains(nav, "Clients") || strings.Contains(nav, "Rules") || strings.Contains(nav, "Why") {
		t.Errorf("the broker's menu: %q, want Keys and Clients only", nav)
	}
	shoot(t, ctx, "broker-keys")

	// 1,200 more keys: a page, then a next one, the first link back.
	for i := range 1200 {
		userSet(t, user, fmt.Sprintf("p/%04d", i), "v")
	}
	if err := goTo(ctx, "#/keys?pattern=p/*", "#next-page"); err != nil {
		t.Fatalf("keys p/*: %v; the page says %q", err, text(t, ctx, "main"))
	}
	first := countRows(t, ctx)
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#next-page")), chromedp.WaitVisible(chromedp.CSS("#first-page"))); err != nil {
		t.Fatalf("the next page: %v; the page says %q", err, text(t, ctx, "main"))
	}
	if second := countRows(t, ctx); first+second != 1200 || first < 500 {
		t.Errorf("pages of p/*: %d then %d keys, want 1,200 in two", first, second)
	}
	if n, _ := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#next-page").length`)); n != 0 {
		t.Error("the last page links a next one")
	}

	if err := goTo(ctx, "#/clients", `main tr[data-client]`); err != nil {
		t.Fatalf("clients page: %v; the page says %q", err, text(t, ctx, "main"))
	}
	row := text(t, ctx, `main tr[data-client]`)
	if !strings.Contains(row, "<i>door-sensor</i>") || !strings.Contains(row, "127.0.0.1:") {
		t.Errorf("the client's row: %q, want its id as text and its address", row)
	}
	shoot(t, ctx, "broker-clients")

	// The default page of the broker's console is its first: Keys.
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS(`#nav a.on[href="#/keys"]`))); err != nil {
		t.Fatalf("the console's first page: %v", err)
	}
}

// countRows counts the keys listed on the page.
func countRows(t *testing.T, ctx context.Context) int {
	t.Helper()
	n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("main tr[data-key]").length`))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// The broker's console off loopback without --admin-token-file is refused
// before anything listens, as dev's and run's are.
func TestBrokerAdminOffLoopbackNeedsTokenFile(t *testing.T) {
	r := runCLI(t, "", "broker", "--listen", "127.0.0.1:0", "--admin", "192.0.2.1:0")
	if r.code != 2 || !strings.Contains(r.stderr, "reachable from other hosts needs a token") || !strings.Contains(r.stderr, "--admin-token-file FILE") {
		t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and the need of a token", r.code, r.stderr)
	}
}

// With --admin-token-file the broker's console answers only requests that
// carry the token, on loopback too.
func TestBrokerConsoleToken(t *testing.T) {
	const token = "0123456789abcdef-broker-cli"
	p := startProc(t, "broker", "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token-file", writeToken(t, token))
	base := "http://" + waitOutput(t, p.stdout, adminListening)[1]
	waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`)) // the broker listens: its pages answer
	get := func(auth string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/console/api/clients", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get(""); code != http.StatusUnauthorized {
		t.Errorf("clients without the token: %d, want 401", code)
	}
	if code := get("Bearer " + token); code != http.StatusOK {
		t.Errorf("clients with the token: %d, want 200", code)
	}
}
