package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

var adminListening = regexp.MustCompile(`admin endpoint on http://(\S+) `)

// scrape GETs http://addr/path and returns the status code and body.
func scrape(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// waitReady waits for /readyz to answer 200 and returns /metrics.
func waitReady(t *testing.T, addr string) string {
	t.Helper()
	testutil.WaitFor(t, "/readyz 200", func() bool { code, _ := scrape(t, addr, "/readyz"); return code == http.StatusOK })
	code, body := scrape(t, addr, "/metrics")
	if code != http.StatusOK {
		t.Fatalf("/metrics: %d", code)
	}
	return body
}

// --admin on dev, run and broker serves the probes and the metrics of what
// the process has: dev the rules, store and broker series, run the rules
// and store ones, broker the broker ones.
func TestAdminFlag(t *testing.T) {
	dir := t.TempDir()
	rule := `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) ss.set("out", ev.value) end
`
	testutil.WriteFiles(t, dir, map[string]string{"copy.lua": rule})
	for _, c := range []struct {
		name      string
		args      []string
		want, not []string
	}{
		{"dev", []string{"dev", dir, "--listen", "127.0.0.1:0"},
			[]string{"ssrun_rule_events_handled_total", "ssrun_store_connected 1", "ssrun_broker_keys"}, nil},
		{"run", []string{"run", dir, "--broker", brokertest.Start(t).Addr()},
			[]string{"ssrun_rule_events_handled_total", "ssrun_store_connected 1"}, []string{"ssrun_broker_"}},
		{"broker", []string{"broker", "--listen", "127.0.0.1:0"},
			[]string{"ssrun_broker_keys 0", "go_goroutines"}, []string{"ssrun_rule_", "ssrun_store_"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			out, errw, stop := start(t, append(c.args, "--admin", "127.0.0.1:0")...)
			addr := waitOutput(t, out, adminListening)[1]
			if code, body := scrape(t, addr, "/healthz"); code != http.StatusOK || body != "ok\n" {
				t.Fatalf("/healthz: %d %q", code, body)
			}
			metrics := waitReady(t, addr)
			for _, w := range c.want {
				if !strings.Contains(metrics, w) {
					t.Errorf("/metrics lacks %q", w)
				}
			}
			for _, n := range c.not {
				if strings.Contains(metrics, n) {
					t.Errorf("/metrics has %q", n)
				}
			}
			if c.name != "broker" { // the rule's events are counted
				broker := c.args[len(c.args)-1]
				if c.name == "dev" {
					broker = waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) `))[1]
				}
				runCLI(t, "", "kv", "--broker", broker, "set", "in", "x")
				testutil.WaitFor(t, "the event counted on /metrics", func() bool {
					_, body := scrape(t, addr, "/metrics")
					return strings.Contains(body, `ssrun_rule_events_handled_total{kind="lua",rule="copy.lua"} 1`)
				})
			}
			if code := stop(); code != 0 {
				t.Fatalf("%s exit %d; stderr:\n%s", c.name, code, errw.String())
			}
			if _, err := http.Get("http://" + addr + "/healthz"); err == nil {
				t.Fatal("admin endpoint still answering after exit")
			}
		})
	}
}

// A bad --admin value is a usage error naming the flag.
func TestAdminFlagBadAddress(t *testing.T) {
	r := runCLI(t, "", "broker", "--listen", "127.0.0.1:0", "--admin", "host:port")
	if r.code != 2 || !strings.Contains(r.stderr, "--admin") || !strings.Contains(r.stderr, `port "port"`) {
		t.Fatalf("%+v", r)
	}
}

// waitReadyz waits for /readyz to answer code with a body containing want.
func waitReadyz(t *testing.T, addr string, code int, want string) {
	t.Helper()
	var got int
	var body string
	testutil.WaitFor(t, fmt.Sprintf("/readyz %d with %q", code, want), func() bool {
		got, body = scrape(t, addr, "/readyz")
		return got == code && strings.Contains(body, want)
	})
}

// What an operator could not tell before: `ssrun run` with a broken rule,
// or with the broker unreachable, is not ready, and says why; with
// --ready-allow-failed-rules the broken rule alone does not keep it from
// being ready.
func TestAdminReadyzOnRun(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{"broken.lua": "function on_event(ev\n"})
	b := brokertest.Start(t)
	out, _, stop := start(t, "run", dir, "--broker", b.Addr(), "--admin", "127.0.0.1:0")
	addr := waitOutput(t, out, adminListening)[1]
	waitReadyz(t, addr, http.StatusServiceUnavailable, "[-]rules failed: 1 rule file(s) failed to load")
	stop()

	out, _, stop = start(t, "run", dir, "--broker", b.Addr(), "--admin", "127.0.0.1:0", "--ready-allow-failed-rules")
	addr = waitOutput(t, out, adminListening)[1]
	waitReadyz(t, addr, http.StatusOK, "[+]rules ok")
	stop()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	ln.Close()
	out, _, _ = start(t, "run", t.TempDir(), "--broker", nobody, "--admin", "127.0.0.1:0")
	addr = waitOutput(t, out, adminListening)[1]
	waitReadyz(t, addr, http.StatusServiceUnavailable, "[-]store failed: ")
}
