package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
)

// chainAdmin runs `ssrun dev --admin` (the binary, as a user would) on a
// copy of the examples/chain rules, plays the chain's first step as the
// door sensor (client id "door-sensor"), waits until its last write is in
// the journal, and returns the admin endpoint's address and the user's
// client.
func chainAdmin(t *testing.T) (addr string, user *protocol.Client) {
	t.Helper()
	addr, user = chainDev(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, kv := range [][2]string{{"alarm/armed", "yes"}, {"door/front", "open"}} {
		if _, err := user.Set(ctx, []byte(kv[0]), []byte(kv[1]), protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the siren's write in the journal", func() bool {
		return runCLI(t, "", "why", "siren/garden", "--admin", addr).code == 0
	})
	return addr, user
}

// chainDev runs `ssrun dev --admin 127.0.0.1:0` and args on a copy of the
// examples/chain rules and files (name -> content), and returns the admin
// endpoint's address and a client of its broker with id door-sensor.
func chainDev(t *testing.T, files map[string]string, args ...string) (addr string, user *protocol.Client) {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"door.lua", "alarm.lua"} {
		copyFile(t, filepath.Join("../../examples/chain", f), filepath.Join(dir, f), 0o644)
	}
	testutil.WriteFiles(t, dir, files)
	p, brokerAddr := startDev(t, dir, append([]string{"--admin", "127.0.0.1:0"}, args...)...)
	addr = waitOutput(t, p.stdout, adminListening)[1]
	user = protocoltest.Connect(t, protocol.Config{Servers: []string{brokerAddr}, ClientID: "door-sensor"})
	return addr, user
}

// `ssrun why` on the automation-chain example names the rules on the
// chain and the outside write that started it, with the writer's client id.
func TestWhyChain(t *testing.T) {
	addr, _ := chainAdmin(t)
	r := runCLI(t, "", "why", "siren/garden", "--admin", addr)
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	v := `\d{15}:\d{5}:StateStore`
	matchLines(t, r.stdout, []*regexp.Regexp{
		regexp.MustCompile(`^siren/garden = "on", version ` + v + `$`),
		regexp.MustCompile(`^  set by alarm\.lua at \d{4}-\d\d-\d\dT`),
		regexp.MustCompile(`^  handling SET alarm/state, version ` + v + `, written by rule door\.lua$`),
		regexp.MustCompile(`^chain:$`),
		regexp.MustCompile(`^  SET door/front by client door-sensor, version ` + v + `$`),
		regexp.MustCompile(`^  -> door\.lua: SET alarm/state, version ` + v + `$`),
		regexp.MustCompile(`^  -> alarm\.lua: SET siren/garden, version ` + v + `$`),
	})

	r = runCLI(t, "", "why", "-o", "json", "--admin", addr, "siren/garden")
	var w provenance.Write
	if err := json.Unmarshal([]byte(r.stdout), &w); r.code != 0 || err != nil {
		t.Fatalf("-o json: %v %+v", err, r)
	}
	if w.Rule != "alarm.lua" || w.Origin == nil || w.Origin.Client != "door-sensor" || len(w.Chain) != 2 {
		t.Fatalf("-o json: %+v", w)
	}

	if r := runCLI(t, "", "why", "alarm/armed", "--admin", addr); r.code != 1 || !strings.Contains(r.stderr, `alarm/armed: no rule wrote "alarm/armed"`) {
		t.Fatalf("a key only the user wrote: %+v", r)
	}
}

func TestStatusTable(t *testing.T) {
	addr, _ := chainAdmin(t)
	r := runCLI(t, "", "status", "--admin", addr)
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	matchLines(t, r.stdout, []*regexp.Regexp{
		regexp.MustCompile(`^RULE +KIND +VERSION +STATE +HANDLED +FAILED +DROPPED +QUEUED +WATCHES +LOCKS +TIMERS$`),
		regexp.MustCompile(`^alarm\.lua +lua +[0-9a-f]{12} +running +1 +0 +0 +0 +1 +0 +0$`),
		regexp.MustCompile(`^door\.lua +lua +[0-9a-f]{12} +running +1 +0 +0 +0 +1 +0 +0$`),
		regexp.MustCompile(`^$`),
		regexp.MustCompile(`^alarm\.lua \(.*/alarm\.lua\)$`),
		regexp.MustCompile(`^  watches: alarm/state$`),
		regexp.MustCompile(`^$`),
		regexp.MustCompile(`^door\.lua \(.*/door\.lua\)$`),
		regexp.MustCompile(`^  watches: door/front$`),
		regexp.MustCompile(`^$`),
		regexp.MustCompile(`^host: \d+ notifications, 2 watched keys, 0 loops damped, 0 resyncs, 0 stuck calls, 0 timers$`),
	})
	r = runCLI(t, "", "status", "-o", "json", "--admin", addr)
	var doc admin.StatusDoc
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil || len(doc.Rules) != 2 || doc.Rules[0].Name != "alarm.lua" {
		t.Fatalf("-o json: %v %+v", err, r)
	}
}

// The clients say what is wrong: nothing listening (and how to start it),
// an endpoint without /status or /why (ssrun broker's), bad flags.
// A rule under overload shows in its details what became of its events:
// coalesced, restarted, in flight; a rule with none of them shows no such
// line (TestStatusTable).
func TestPrintStatusShowsOverload(t *testing.T) {
	var b strings.Builder
	doc := admin.StatusDoc{Rules: []admin.RuleDoc{{Name: "t.lua", Path: "/r/t.lua", Kind: "lua", State: "running",
		Coalesced: 3, Restarted: 1, InFlight: 2, Watches: []string{"k"}}}}
	if err := printStatus(&b, doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "\n  events:  3 coalesced, 1 restarted, 2 in flight\n") {
		t.Errorf("status:\n%s\nwant an events line with 3 coalesced, 1 restarted, 2 in flight", b.String())
	}
}

func TestAdminClientErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	for _, args := range [][]string{{"status"}, {"why", "k"}} {
		r := runCLI(t, "", append(args, "--admin", closed)...)
		if r.code != 2 || !strings.Contains(r.stderr, "nothing answers at "+closed) || !strings.Contains(r.stderr, "with --admin") {
			t.Errorf("%v, nothing listening: %+v", args, r)
		}
	}
	broker := httptest.NewServer(http.NotFoundHandler()) // a mux without /status: plain-text 404s
	defer broker.Close()
	if r := runCLI(t, "", "status", "--admin", broker.URL); r.code != 2 || !strings.Contains(r.stderr, "has no /status") {
		t.Errorf("no /status: %+v", r)
	}
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "boom", http.StatusInternalServerError)
	}))
	defer broken.Close()
	if r := runCLI(t, "", "why", "k", "--admin", broken.URL); r.code != 2 || !strings.Contains(r.stderr, "500 Internal Server Error") || !strings.Contains(r.stderr, "boom") {
		t.Errorf("a server error: %+v", r)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status", "-o", "yaml"}, `--output "yaml": want text or json`},
		{[]string{"why", "k", "-o", "yaml"}, `--output "yaml": want text or json`},
		{[]string{"status", "--admin", "a:b:c"}, `want HOST:PORT, :PORT or PORT`},
		{[]string{"why"}, "usage: ssrun why KEY"},
		{[]string{"status", "extra"}, "unknown command"},
	} {
		if r := runCLI(t, "", c.args...); r.code != 2 || !strings.Contains(r.stderr, c.want) {
			t.Errorf("%v: %+v, want %q", c.args, r, c.want)
		}
	}
}

func TestAdminURL(t *testing.T) {
	for in, want := range map[string]string{
		"9310":                 "http://127.0.0.1:9310/why?key=a%2Fb",
		":9310":                "http://127.0.0.1:9310/why?key=a%2Fb",
		"10.0.0.5:9310":        "http://10.0.0.5:9310/why?key=a%2Fb",
		"[::1]:9310":           "http://[::1]:9310/why?key=a%2Fb",
		"https://ssrun.local/": "https://ssrun.local/why?key=a%2Fb",
	} {
		got, err := adminURL(in, "/why", map[string][]string{"key": {"a/b"}})
		if err != nil || got != want {
			t.Errorf("adminURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

// printWhy's other shapes: a cut value, a delete, a write at load, a
// timer's chain, an outside writer the store does not name.
func TestPrintWhy(t *testing.T) {
	at := time.Date(2026, 11, 23, 15, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		w    provenance.Write
		want string
	}{
		{provenance.Write{Key: "k", Rule: "r.lua", Op: "SET", Value: "abc", ValueSize: 1000, Truncated: true, Version: "v2", At: at,
			Event: provenance.Cause{Key: "in", Op: "SET", Version: "v1"}, Origin: &provenance.Origin{Key: "in", Op: "SET", Version: "v1"},
			Chain: []provenance.Step{{Rule: "r.lua", Key: "k", Op: "SET", Version: "v2"}}},
			`k = "abc" (first 3 of 1000 bytes), version v2
  set by r.lua at 2026-11-23T15:04:05Z
  handling SET in, version v1, from outside the rules (the store does not name the writer)
chain:
  SET in from outside the rules (the store does not name the writer), version v1
  -> r.lua: SET k, version v2
`},
		{provenance.Write{Key: "k", Rule: "r.lua", Op: "DEL", At: at, Event: provenance.Cause{Key: "door", Op: "TIMER"},
			Chain: []provenance.Step{{Rule: "r.lua", Key: "k", Op: "DEL"}}},
			`k deleted (DEL) by r.lua at 2026-11-23T15:04:05Z
  handling TIMER door
chain:
  TIMER door (no outside write)
  -> r.lua: DEL k
`},
		{provenance.Write{Key: "boot", Rule: "r.lua", Op: "SET", Value: "1", ValueSize: 1, Version: "v1", At: at,
			Chain: []provenance.Step{{Rule: "r.lua", Key: "boot", Op: "SET", Version: "v1"}}},
			`boot = "1", version v1
  set by r.lua at 2026-11-23T15:04:05Z
  outside a handler (while the rule loaded, or from a plugin's own goroutine)
`},
	} {
		var b strings.Builder
		if err := printWhy(&b, c.w); err != nil || b.String() != c.want {
			t.Errorf("printed (%v):\n%s\nwant:\n%s", err, b.String(), c.want)
		}
	}
}
