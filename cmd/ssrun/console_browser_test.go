package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/ssrun/ssrun/protocol"
)

// The web console in a real headless browser (Debian's chromium, driven
// over the DevTools protocol by chromedp) on `ssrun dev` running the
// automation-chain example, as a person would use it.

// chromium returns the browser to drive: $SSRUN_CHROMIUM, else chromium on
// the PATH. Without one the test is skipped, unless SSRUN_REQUIRE_CHROMIUM
// is set (.ci/run installs Debian's chromium and sets it): then it fails.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("SSRUN_CHROMIUM"); p != "" {
		return p
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("SSRUN_REQUIRE_CHROMIUM") != "" {
			t.Fatalf("SSRUN_REQUIRE_CHROMIUM is set and there is no chromium: %v", err)
		}
		t.Skip("no chromium on the PATH (apt-get install chromium); .ci/run installs it and requires it")
	}
	return p
}

// browser starts a headless chromium with a fresh profile and no
// background traffic, and returns the context that drives its tab and a
// count of the JavaScript dialogs (alert) it opened. Both end with the test.
func browser(t *testing.T) (context.Context, *atomic.Int32) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1100, 640),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
	)
	actx, stopAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, stopTab := chromedp.NewContext(actx)
	ctx, stopTimer := context.WithTimeout(ctx, 2*time.Minute)
	t.Cleanup(func() {
		stopTimer()
		_ = chromedp.Cancel(ctx) // closes the browser
		stopTab()
		stopAlloc() // waits for its process
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	// A dialog would block the page: the next step fails, and the count
	// says why.
	var dialogs atomic.Int32
	if err := chromedp.Listen(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialogs.Add(1)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return ctx, &dialogs
}

// shoot saves a screenshot of the tab as $SSRUN_CONSOLE_SCREENSHOTS/name.png
// when that is set (docs/console/ is made so).
func shoot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("SSRUN_CONSOLE_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// goTo shows the console page at hash and waits until sel is visible.
func goTo(ctx context.Context, hash, sel string) error {
	// The page in view is cleared first, so that sel cannot be found in it
	// (the keys page's table is no timers table); the same hash again
	// draws anew through a hashchange event.
	js := fmt.Sprintf(`document.querySelector("main").replaceChildren();
if (location.hash === %[1]q) { window.dispatchEvent(new HashChangeEvent("hashchange")); } else { location.hash = %[1]q; }
location.hash`, hash)
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[string](js)); err != nil {
		return err
	}
	return chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(sel)))
}

// waitFor waits until sel is visible, at most 20 s, and fails the test
// with the page's text if it is not.
func waitFor(t *testing.T, ctx context.Context, sel string) {
	t.Helper()
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.WaitVisible(chromedp.CSS(sel))); err != nil {
		t.Fatalf("%s not shown (%v); the page says: %q", sel, err, text(t, ctx, "body"))
	}
}

// text returns the text of the element sel.
func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

const (
	guardRule = `local ss = require("ssrun")
ss.watch("vault/status")
local ok, msg = ss.watch("vault/door") -- refused: ssrun.yaml lets it watch vault/status only
function on_event(ev) end
`
	echoRule = `local ss = require("ssrun")
ss.watch("counter/x")
function on_event(ev) if ev.value ~= "seen" then assert(ss.set("counter/x", "seen")) end end
`
	tickRule = `local ss = require("ssrun")
assert(ss.timer("hourly-report", 3600 * 1000, {every = 3600 * 1000, payload = "report"}))
function on_event(ev) end
`
	consoleYAML = "rules:\n  guard.lua:\n    watch: [vault/status]\n"
	hostileKey  = "<script>alert(1)</script>"
	hostileVal  = `<img src=x onerror="alert(2)">`
)

// consoleDev runs `ssrun dev --admin 127.0.0.1:0` and extra on the chain
// example plus a rule whose watch is refused and one that writes the key
// it watches, and returns the console's URL and a client with id
// door-sensor.
func consoleDev(t *testing.T, extra ...string) (base string, user *protocol.Client) {
	t.Helper()
	addr, user := chainDev(t, map[string]string{"guard.lua": guardRule, "echo.lua": echoRule, "tick.lua": tickRule, "ssrun.yaml": consoleYAML}, extra...)
	return "http://" + addr, user
}

func userSet(t *testing.T, user *protocol.Client, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := user.Set(ctx, []byte(key), []byte(value), protocol.SetOptions{}); err != nil {
		t.Fatalf("set %s: %v", key, err)
	}
}

// The chain seen live: the door sensor's write shows up as rows on the live
// page; a click on alarm.lua's run draws why siren/garden is on, naming
// the outside client and every rule on the way. The rules, rule, keys,
// why-not (a refused watch, an echo), timers and group pages draw, and a
// key and value made of HTML are shown as text, no script run.
func TestConsoleInBrowser(t *testing.T) {
	base, user := consoleDev(t)
	ctx, dialogs := browser(t)

	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/#/events"), chromedp.WaitVisible(chromedp.CSS("#events"))); err != nil {
		t.Fatalf("live page: %v", err)
	}
	userSet(t, user, "alarm/armed", "yes")
	userSet(t, user, "door/front", "open")
	row := `#events tr[data-rule="alarm.lua"]`
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(row)), chromedp.WaitVisible(chromedp.CSS(`#events tr[data-rule="door.lua"]`))); err != nil {
		t.Fatalf("the chain's rows: %v", err)
	}
	rowText := text(t, ctx, row)
	if !strings.Contains(rowText, "alarm/state") || !strings.Contains(rowText, "door.lua") || !strings.Contains(rowText, "siren/garden") || !strings.Contains(rowText, "handled") {
		t.Errorf("alarm.lua's row: %q, want its event (alarm/state, by door.lua), outcome and write (siren/garden)", rowText)
	}
	shoot(t, ctx, "events")

	// Paused, the page holds what comes; resumed, it shows it.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#pause"))); err != nil {
		t.Fatal(err)
	}
	if label := text(t, ctx, "#pause"); label != "Resume" {
		t.Fatalf("pause button says %q once clicked, want Resume", label)
	}
	userSet(t, user, "door/front", "closed")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#pause"))); err != nil {
		t.Fatal(err)
	}
	// Two door.lua rows: the run on door/front closed is drawn (a single
	// door.lua row may be the first already, when its run on "open" was
	// traced after alarm.lua's).
	waitFor(t, ctx, `#events tr[data-rule="door.lua"] ~ tr[data-rule="door.lua"]`)
	if first := text(t, ctx, "#events tr:first-child"); !strings.Contains(first, "door/front") || strings.Contains(first, "alarm/state") {
		t.Errorf("newest row after resuming: %q, want door.lua's run on door/front closed (it writes nothing)", first)
	}

	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(row)), chromedp.WaitVisible(chromedp.CSS(`#chain .hop[data-rule="alarm.lua"]`))); err != nil {
		t.Fatalf("why picture: %v", err)
	}
	chain := text(t, ctx, "#chain")
	for _, w := range []string{"client door-sensor", "SET door/front", "door.lua", "SET alarm/state", "alarm.lua", "SET siren/garden"} {
		if !strings.Contains(chain, w) {
			t.Errorf("why picture %q lacks %q", chain, w)
		}
	}
	if i, j := strings.Index(chain, "door.lua"), strings.Index(chain, "alarm.lua"); i < 0 || j < i {
		t.Errorf("why picture %q: want door.lua before alarm.lua", chain)
	}
	shoot(t, ctx, "why")

	if err := goTo(ctx, "#/rules", `a[href="#/rule?name=door.lua"]`); err != nil {
		t.Fatalf("rules page: %v", err)
	}
	shoot(t, ctx, "rules")
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS(`a[href="#/rule?name=door.lua"]`))); err != nil {
		t.Fatalf("rule page: %v", err)
	}
	waitFor(t, ctx, "h2.ok")
	ruleText := text(t, ctx, "main")
	if !strings.Contains(ruleText, "door/front") || !strings.Contains(ruleText, "handled (last 2)") {
		t.Errorf("door.lua's page: %q, want its watch and its handled run", ruleText)
	}
	shoot(t, ctx, "rule")

	// The why-not page: a refused watch, then an echo.
	if err := goTo(ctx, "#/whynot?key=vault/door&rule=guard.lua", `#reasons .reason[data-code="permission"]`); err != nil {
		t.Fatalf("why not, a refused watch: %v", err)
	}
	if reasons := text(t, ctx, "#reasons"); !strings.Contains(reasons, "watch vault/door: not permitted") {
		t.Errorf("why not guard.lua vault/door: %q", reasons)
	}
	shoot(t, ctx, "whynot")
	userSet(t, user, "counter/x", "1")
	if err := goTo(ctx, "#/rules", `a[href="#/rule?name=echo.lua"]`); err != nil {
		t.Fatal(err)
	}
	var reasons string
	deadline := time.Now().Add(20 * time.Second)
	for { // the echo is skipped after the write's notification comes back
		if err := goTo(ctx, "#/whynot?key=counter/x&rule=echo.lua", `#reasons .reason`); err != nil {
			t.Fatal(err)
		}
		reasons = text(t, ctx, "#reasons")
		if strings.HasPrefix(reasons, "echo ") || time.Now().After(deadline) {
			break
		}
		if err := goTo(ctx, "#/rules", `a[href="#/rule?name=echo.lua"]`); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.HasPrefix(reasons, "echo ") || !strings.Contains(reasons, "own write") {
		t.Errorf("why not echo.lua counter/x: %q, want the echo first", reasons)
	}

	// HTML in a key and its value is text.
	userSet(t, user, hostileKey, hostileVal)
	if err := goTo(ctx, "#/keys?pattern=*", "table"); err != nil {
		t.Fatalf("keys page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(`[...document.querySelectorAll("td")].find((td) => td.textContent === %q).click() === undefined`, hostileKey))); err != nil {
		t.Fatalf("click the hostile key: %v", err)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS("#key pre"))); err != nil {
		t.Fatalf("the hostile key's value: %v", err)
	}
	value := text(t, ctx, "#key pre")
	scripts, err1 := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("script").length`))
	imgs, err2 := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("img").length`))
	if err1 != nil || err2 != nil {
		t.Fatal(err1, err2)
	}
	if value != hostileVal || scripts != 1 || imgs != 0 || dialogs.Load() != 0 {
		t.Errorf("value shown %q (want %q as text); %d script elements (want the console's 1), %d img, %d dialogs", value, hostileVal, scripts, imgs, dialogs.Load())
	}
	shoot(t, ctx, "keys")
	// tick.lua's timer is kept under $ssrun/: hidden, until the toggle.
	reservedRows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('main tr[data-key^="$ssrun/"]').length`))
	if keys := text(t, ctx, "main table"); err != nil || reservedRows != 0 || !strings.Contains(keys, "under $ssrun/ hidden") {
		t.Errorf("keys page: %q (%d $ssrun/ rows, %v), want the $ssrun/ keys hidden and counted", keys, reservedRows, err)
	}
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.CSS("#reserved")), chromedp.WaitVisible(chromedp.CSS(`main tr[data-key^="$ssrun/timers/"]`))); err != nil {
		t.Fatalf("keys page with the $ssrun/ keys shown: %v; the page says %q", err, text(t, ctx, "main"))
	}

	if err := goTo(ctx, "#/timers", "main table"); err != nil {
		t.Fatalf("timers page: %v", err)
	}
	if timers := text(t, ctx, "main table"); !strings.Contains(timers, "tick.lua") || !strings.Contains(timers, "hourly-report") || !strings.Contains(timers, "3600000 ms") || !strings.Contains(timers, "6 B") {
		t.Errorf("timers page: %q, want tick.lua's hourly-report, every 3600000 ms, 6 B of payload", timers)
	}
	shoot(t, ctx, "timers")
	if err := goTo(ctx, "#/group", "main p"); err != nil {
		t.Fatalf("group page: %v", err)
	}
	if group := text(t, ctx, "main"); !strings.Contains(group, "not in a group") {
		t.Errorf("group page of dev: %q", group)
	}
	shoot(t, ctx, "group")
}

// With a token, the console answers 401 without it: the browser gets the
// login form; the right token opens the rules page.
func TestConsoleInBrowserNeedsToken(t *testing.T) {
	token := "0123456789abcdef-browser"
	base, _ := consoleDev(t, "--admin-token-file", writeToken(t, token))
	ctx, _ := browser(t)
	res, err := chromedp.RunResponse(ctx, chromedp.Navigate(base+"/"))
	if err != nil {
		t.Fatalf("open the console: %v", err)
	}
	if res.Status != 401 {
		t.Errorf("the page without the token: status %d, want 401", res.Status)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`input[name="token"]`))); err != nil {
		t.Fatalf("login form: %v", err)
	}
	shoot(t, ctx, "login")
	if err := chromedp.Do(ctx, chromedp.SendKeys(chromedp.CSS(`input[name="token"]`), token), chromedp.Submit(chromedp.CSS(`form`)),
		chromedp.WaitVisible(chromedp.CSS(`a[href="#/rule?name=door.lua"]`))); err != nil {
		t.Fatalf("after the login: %v", err)
	}
}
