package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// Every why-not reason, produced on a real host (Lua rules, the embedded
// broker) whose Tracer is the console, then asked of the console.

// consoleRig is a host on the embedded broker with the console as its
// Tracer, and a user client.
type consoleRig struct {
	t       *testing.T
	host    *host.Host
	console *admin.Console
	user    *protocol.Client
}

// newConsoleRig loads rules (file name -> Lua source) into a host of cfg
// whose Tracer is a console, given to each of with first.
func newConsoleRig(t *testing.T, rules map[string]string, cfg host.Config, with ...func(*admin.Console)) *consoleRig {
	t.Helper()
	b := brokertest.Start(t)
	r := &consoleRig{t: t, console: admin.NewConsole(admin.ConsoleConfig{}), user: connect(t, b.Addr(), nil)}
	for _, f := range with {
		f(r.console)
	}
	cfg.Store, cfg.Tracer = connect(t, b.Addr(), nil), r.console
	if cfg.Defaults.Timeout == 0 {
		cfg.Defaults.Timeout = 30 * time.Second // a loaded machine is slow, not wrong
	}
	r.host = luaHost(t, cfg)
	loadRules(t, r.host, rules)
	return r
}

func (r *consoleRig) set(key, value string) {
	r.t.Helper()
	setKey(r.t, r.user, key, value)
}

// waitFirst waits until the first reason of why rule did not react to key
// is code, and returns the answer.
func (r *consoleRig) waitFirst(key, rule, code string) admin.WhyNotDoc {
	r.t.Helper()
	var doc admin.WhyNotDoc
	testutil.WaitFor(r.t, fmt.Sprintf("why not %s %s: %s", rule, key, code), func() bool {
		doc = r.console.WhyNot(r.host, key, rule)
		return len(doc.Reasons) > 0 && doc.Reasons[0].Code == code
	})
	return doc
}

func hasReason(doc admin.WhyNotDoc, code string) bool {
	for _, r := range doc.Reasons {
		if r.Code == code {
			return true
		}
	}
	return false
}

func TestWhyNotNotWatched(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"a.lua": `local ss = require("ssrun"); ss.watch("a/in"); function on_event(ev) end`}, host.Config{})
	r.set("b/in", "1")
	doc := r.waitFirst("b/in", "a.lua", admin.WhyNotWatched)
	if !strings.Contains(doc.Reasons[0].Text, `"a/in"`) || hasReason(doc, admin.WhyNotPermission) {
		t.Errorf("%+v: want its watches named, and no permission reason (it may watch any key)", doc)
	}
}

// A key a rule's pattern watch covers is watched: why-not says it reacted,
// not that it watches no such key; a key the pattern does not cover is
// not watched, with the pattern named.
func TestWhyNotPatternWatch(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"f.lua": `local ss = require("ssrun")
assert(ss.watch_pattern("fleet/*/in"))
function on_event(ev) end`}, host.Config{})
	r.set("fleet/7/in", "1")
	doc := r.waitFirst("fleet/7/in", "f.lua", admin.WhyNotReacted)
	if hasReason(doc, admin.WhyNotWatched) {
		t.Errorf("%+v: the pattern covers the key, yet it is called not watched", doc)
	}
	r.set("fleet/7/out", "1")
	doc = r.waitFirst("fleet/7/out", "f.lua", admin.WhyNotWatched)
	if !strings.Contains(doc.Reasons[0].Text, `"fleet/*/in"`) {
		t.Errorf("%+v: want the rule's pattern named", doc)
	}
}

func TestWhyNotPermission(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"p.lua": `local ss = require("ssrun")
ss.watch("ok/in")
local ok, msg = ss.watch("secret/in")
assert(ok == nil, "the watch should be refused")
function on_event(ev) end`}, host.Config{Rules: map[string]host.RuleConfig{"p.lua": {Watch: []string{"ok/*"}}}})
	r.set("secret/in", "1")
	doc := r.waitFirst("secret/in", "p.lua", admin.WhyNotPermission)
	if doc.Reasons[0].Entry == nil || !strings.Contains(doc.Reasons[0].Text, "watch secret/in") || !hasReason(doc, admin.WhyNotWatched) {
		t.Errorf("%+v: want the refused watch first, then not watched", doc)
	}
}

func TestWhyNotEcho(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"e.lua": `local ss = require("ssrun")
ss.watch("e/in")
function on_event(ev) if ev.value ~= "done" then assert(ss.set("e/in", "done")) end end`}, host.Config{})
	r.set("e/in", "go")
	doc := r.waitFirst("e/in", "e.lua", admin.WhyNotEcho)
	if e := doc.Reasons[0].Entry; e == nil || e.Outcome != admin.OutcomeSkipped {
		t.Errorf("%+v: want the skipped echo", doc)
	}
}

func TestWhyNotDamped(t *testing.T) {
	// Two rules that keep triggering each other, stopped after 3 hops.
	ping := `local ss = require("ssrun")
ss.watch("%s")
function on_event(ev) assert(ss.set("%s", tostring((tonumber(ev.value) or 0) + 1))) end`
	r := newConsoleRig(t, map[string]string{
		"ping.lua": fmt.Sprintf(ping, "p/a", "p/b"),
		"pong.lua": fmt.Sprintf(ping, "p/b", "p/a"),
	}, host.Config{MaxHops: 3})
	r.set("p/a", "0")
	var damped admin.Entry
	testutil.WaitFor(t, "a damped change", func() bool {
		for _, e := range r.console.Recent() {
			if e.Reason == string(host.SkipDamped) {
				damped = e
				return true
			}
		}
		return false
	})
	rule := map[string]string{"p/a": "ping.lua", "p/b": "pong.lua"}[damped.Key]
	doc := r.waitFirst(damped.Key, rule, admin.WhyNotDamped)
	if e := doc.Reasons[0].Entry; e == nil || e.Version != damped.Version || e.ByRule == "" {
		t.Errorf("%+v: want the damped change %s, written by a rule", doc, damped.Version)
	}
}

// gatedRule is a Lua rule watching keys whose first event's handler sets
// P/waiting and then waits until P/gate is "open"; later events return at
// once.
func gatedRule(p string, keys ...string) string {
	src := `local ss = require("ssrun")` + "\n"
	for _, k := range keys {
		src += fmt.Sprintf("ss.watch(%q)\n", k)
	}
	return src + fmt.Sprintf(`local waited = false
function on_event(ev)
  if waited then return end
  waited = true
  ss.set(%q, "yes")
  while ss.get(%q) ~= "open" do end
end`, p+"/waiting", p+"/gate")
}

// inGatedHandler sets key to "1" and waits until gatedRule's handler (of
// prefix p) waits for its gate.
func (r *consoleRig) inGatedHandler(p, key string) {
	r.t.Helper()
	r.set(key, "1")
	testutil.WaitFor(r.t, "the first event in the handler", func() bool {
		res, err := r.user.Get(context.Background(), []byte(p+"/waiting"), protocol.CallOptions{})
		return err == nil && res.Found
	})
}

func TestWhyNotMailboxFull(t *testing.T) {
	// The handler waits for m/gate on its first event; meanwhile the
	// mailbox (1 place, 1 key) holds one change of m/in and drops the
	// changes of m/other, a key with nothing waiting past mailbox_keys (a
	// change of m/in would conflate into the waiting one instead).
	r := newConsoleRig(t, map[string]string{"m.lua": gatedRule("m", "m/in", "m/other")},
		host.Config{Rules: map[string]host.RuleConfig{"m.lua": {Mailbox: 1, MailboxKeys: 1}}})
	r.inGatedHandler("m", "m/in")
	r.set("m/in", "2")
	for i := 3; i <= 4; i++ {
		r.set("m/other", fmt.Sprint(i))
	}
	doc := r.waitFirst("m/other", "m.lua", admin.WhyNotMailbox)
	r.set("m/gate", "open")
	// The change it kept runs late; the last change's drop still answers.
	testutil.WaitFor(t, "the queued change handled", func() bool { return r.host.Status()[0].Handled == 2 })
	if doc = r.console.WhyNot(r.host, "m/other", "m.lua"); doc.Reasons[0].Code != admin.WhyNotMailbox {
		t.Errorf("after the late run: %+v, want the last change's drop", doc)
	}
}

// In mode latest a change that waits in the mailbox is coalesced into the
// key's next change: why-not names both versions while the newer one
// waits, and says the rule reacted once it has run.
func TestWhyNotCoalesced(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"c.lua": gatedRule("c", "c/in")}, host.Config{Rules: map[string]host.RuleConfig{"c.lua": {Mode: host.ModeLatest}}})
	r.inGatedHandler("c", "c/in")
	ctx := context.Background()
	var versions []string
	for _, v := range []string{"2", "3"} {
		res, err := r.user.Set(ctx, []byte("c/in"), []byte(v), protocol.SetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		versions = append(versions, res.Version.String())
	}
	doc := r.waitFirst("c/in", "c.lua", admin.WhyNotCoalesced)
	if e := doc.Reasons[0].Entry; e == nil || e.Version != versions[0] || e.Into != versions[1] ||
		!strings.Contains(doc.Reasons[0].Text, "coalesced into version "+versions[1]) {
		t.Errorf("%+v: want version %s coalesced into %s", doc.Reasons[0], versions[0], versions[1])
	}
	r.set("c/gate", "open")
	doc = r.waitFirst("c/in", "c.lua", admin.WhyNotReacted)
	if e := doc.Reasons[0].Entry; e == nil || e.Version != versions[1] {
		t.Errorf("%+v: want the newer change %s handled", doc.Reasons[0], versions[1])
	}
}

func TestWhyNotFailingThenDisabled(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"f.lua": `local ss = require("ssrun")
ss.watch("f/in")
function on_event(ev) error("broken " .. ev.value) end`}, host.Config{})
	r.set("f/in", "1")
	doc := r.waitFirst("f/in", "f.lua", admin.WhyNotFailing)
	if !strings.Contains(doc.Reasons[0].Text, "broken 1") {
		t.Errorf("%+v: want the handler's error", doc)
	}
	// Ten failures in a row disable it; the next change is dropped.
	for i := 2; i <= 10; i++ {
		r.set("f/in", fmt.Sprint(i))
	}
	testutil.WaitFor(t, "the rule disabled", func() bool { return r.host.Status()[0].Disabled })
	r.set("f/in", "11")
	doc = r.waitFirst("f/in", "f.lua", admin.WhyNotDisabled)
	if e := doc.Reasons[0].Entry; e == nil || e.Outcome != admin.OutcomeDropped {
		t.Errorf("%+v: want the dropped change", doc)
	}
}

func TestWhyNotDryRun(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"d.lua": `local ss = require("ssrun")
ss.watch("d/in")
function on_event(ev) assert(ss.set("d/out", ev.value)) end`}, host.Config{DryRun: func(staging.Write) {}})
	r.set("d/in", "1")
	doc := r.waitFirst("d/in", "d.lua", admin.WhyNotReacted)
	if !hasReason(doc, admin.WhyNotDryRun) {
		t.Errorf("%+v: want the dry run named", doc)
	}
}

func TestWhyNotLoading(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"bad.lua": `this is not lua`}, host.Config{})
	if doc := r.console.WhyNot(r.host, "k", "bad.lua"); doc.Reasons[0].Code != admin.WhyNotLoadFailed {
		t.Errorf("a file that failed to load: %+v", doc)
	}
	if doc := r.console.WhyNot(r.host, "k", "later.lua"); doc.Reasons[0].Code != admin.WhyNotLoading {
		t.Errorf("a rule not loaded: %+v", doc)
	}
}

func TestWhyNotLoadingMidStart(t *testing.T) {
	// A rule whose start is held (its top level waits for a lock another
	// client holds) is "loading" until its start returns, and no longer
	// once it has.
	r := newConsoleRig(t, nil, host.Config{})
	setKey(t, r.user, "gate", "held by another client") // a lease is its key: the rule's lock is busy
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"held.lua": `local ss = require("ssrun")
		assert(ss.set("held/started", "yes"))
		assert(ss.lock("gate", 10000, {wait = 60000}))
		ss.watch("k")
		function on_event(ev) end`})
	loaded := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		loaded <- r.host.LoadDir(ctx, dir)
	}()
	testutil.WaitFor(t, "held.lua's start under way", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := r.user.Get(ctx, []byte("held/started"), protocol.CallOptions{})
		return err == nil && res.Found
	})
	select {
	case err := <-loaded:
		t.Fatalf("the load returned (%v) while the rule's start waits for the lock", err)
	default:
	}
	if doc := r.console.WhyNot(r.host, "k", "held.lua"); len(doc.Reasons) == 0 || doc.Reasons[0].Code != admin.WhyNotLoading {
		t.Errorf("a rule caught mid-start: %+v, want %s first", doc, admin.WhyNotLoading)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := r.user.Del(ctx, []byte("gate"), protocol.DelOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := <-loaded; err != nil {
		t.Fatalf("load: %v", err)
	}
	if doc := r.console.WhyNot(r.host, "k", "held.lua"); len(doc.Reasons) == 0 || doc.Reasons[0].Code == admin.WhyNotLoading {
		t.Errorf("a rule whose start returned: %+v, want a reason other than %s", doc, admin.WhyNotLoading)
	}
}

func TestWhyNotNotOwner(t *testing.T) {
	// Two hosts of a group load the same rule; one runs it, the other
	// stands by and says so.
	b := brokertest.Start(t)
	rule := map[string]string{"g.lua": `local ss = require("ssrun"); ss.watch("g/in"); function on_event(ev) end`}
	type member struct {
		h *host.Host
		c *admin.Console
	}
	var ms []member
	for range 2 {
		c := admin.NewConsole(admin.ConsoleConfig{})
		h := luaHost(t, host.Config{Store: connect(t, b.Addr(), nil), Tracer: c, Group: &host.GroupConfig{Name: "console", TTL: time.Second}})
		loadRules(t, h, rule)
		ms = append(ms, member{h, c})
	}
	urls := make([]string, len(ms))
	for i, m := range ms {
		urls[i] = serveConsole(t, m.c, m.h)
	}
	// The host on standby says why it does not run the rule, and its rules
	// page names the rule as run by another host. Ownership may move
	// between the two while a loaded machine lets a lease lapse: what is
	// checked is what a host says while it is on standby, before and
	// after its answers (the last answer is reported on a timeout).
	var last string
	t.Cleanup(func() {
		if t.Failed() {
			t.Log("last answer:", last)
		}
	})
	testutil.WaitFor(t, "a host on standby for g.lua that says so", func() bool {
		for i, m := range ms {
			if !onStandby(m.h) {
				continue
			}
			doc := m.c.WhyNot(m.h, "g/in", "g.lua")
			var page struct{ Owned, Standby []string }
			code, body := fetch(t, urls[i]+"/console/api/rules", "")
			err := json.Unmarshal([]byte(body), &page)
			if !onStandby(m.h) {
				continue // it took the rule meanwhile: ask again
			}
			last = fmt.Sprintf("host %d: why-not %+v; rules page %d %+v (%v)", i, doc.Reasons, code, page, err)
			return len(doc.Reasons) > 0 && doc.Reasons[0].Code == admin.WhyNotOwner &&
				err == nil && code == http.StatusOK && len(page.Owned) == 0 && len(page.Standby) == 1 && page.Standby[0] == "g.lua"
		}
		return false
	})
}

// onStandby reports whether h's one rule stands by (another host of its
// group runs it).
func onStandby(h *host.Host) bool {
	st := h.Status()
	return len(st) == 1 && st[0].State == host.StateStandby
}

// serveConsole serves c of host h on a loopback admin endpoint until the
// test ends, and returns its base URL.
func serveConsole(t *testing.T, c *admin.Console, h *host.Host) string {
	t.Helper()
	srv, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	c.Register(srv, func() admin.ConsoleSource { return h }, func() admin.KeySource { return nil })
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "admin server", srv.Close)
	return "http://" + srv.Addr()
}

// A removed rule's runs go once the rules page is drawn again.
func TestConsoleForgetsRemovedRule(t *testing.T) {
	r := newConsoleRig(t, map[string]string{"a.lua": `local ss = require("ssrun"); ss.watch("a/in"); function on_event(ev) end`}, host.Config{})
	r.set("a/in", "1")
	testutil.WaitFor(t, "a.lua's run", func() bool { return len(r.console.Runs("a.lua")) == 1 })
	base := serveConsole(t, r.console, r.host)
	if code, _ := fetch(t, base+"/console/api/rules", ""); code != http.StatusOK || len(r.console.Runs("a.lua")) != 1 {
		t.Fatalf("a loaded rule's runs: %d %v", code, r.console.Runs("a.lua"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.host.Remove(ctx, r.host.Status()[0].Path); err != nil {
		t.Fatal(err)
	}
	if code, _ := fetch(t, base+"/console/api/rules", ""); code != http.StatusOK || len(r.console.Runs("a.lua")) != 0 {
		t.Errorf("the removed rule's runs: %d %v, want none", code, r.console.Runs("a.lua"))
	}
}
