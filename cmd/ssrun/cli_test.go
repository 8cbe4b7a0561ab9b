package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
)

// result is one run of the command line.
type result struct {
	code           int
	stdout, stderr string
}

// cliBound bounds one command run by runCLI: a guard against a hang, far
// above any honest run. Commands that compile Go WebAssembly guests cold
// (check, test of a built example) take 0.5 s each on an idle machine but
// over 30 s under the race detector on 2 loaded cores (seen in CI).
const cliBound = 5 * time.Minute

// runCLI runs the command line in this process, bounded by cliBound.
func runCLI(t *testing.T, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliBound)
	defer cancel()
	var out, errb bytes.Buffer
	code := run(ctx, args, strings.NewReader(stdin), &out, &errb)
	return result{code, out.String(), errb.String()}
}

func TestKVSession(t *testing.T) {
	b := brokertest.Start(t)
	addr := b.Addr()
	kv := func(stdin string, args ...string) result {
		t.Helper()
		return runCLI(t, stdin, append([]string{"kv", "--broker", addr}, args...)...)
	}
	versionLine := regexp.MustCompile(`^OK \d{15}:\d{5}:StateStore\n$`)

	r := kv("", "set", "greeting", "hello")
	if r.code != 0 || !versionLine.MatchString(r.stdout) {
		t.Fatalf("set: %+v", r)
	}
	if r := kv("", "get", "greeting"); r.code != 0 || r.stdout != "hello\n" {
		t.Fatalf("get: %+v", r)
	}
	// Flags after the positional arguments work too.
	if r := runCLI(t, "", "kv", "get", "greeting", "--broker", addr); r.code != 0 || r.stdout != "hello\n" {
		t.Fatalf("get with --broker last: %+v", r)
	}
	if r := kv("", "set", "greeting", "bonjour", "--nx"); r.code != 1 || !strings.Contains(r.stderr, "not applied") {
		t.Fatalf("set --nx on a present key: %+v", r)
	}
	if r := kv("", "set", "--nx", "--nex", "k", "v"); r.code != 2 || !strings.Contains(r.stderr, "--nx and --nex") {
		t.Fatalf("--nx --nex: %+v", r)
	}
	if r := kv("", "set", "k", "v", "--px", "soon"); r.code != 2 || !strings.Contains(r.stderr, "--px") {
		t.Fatalf("bad --px: %+v", r)
	}
	if r := kv("", "set", "k", "v", "--fence", "nope"); r.code != 2 || !strings.Contains(r.stderr, "fencing token") {
		t.Fatalf("bad --fence: %+v", r)
	}
	// Binary-safe value from stdin.
	if r := kv("a\r\nb\x00c", "set", "blob", "-"); r.code != 0 {
		t.Fatalf("set from stdin: %+v", r)
	}
	if r := kv("", "get", "blob"); r.stdout != "a\r\nb\x00c\n" {
		t.Fatalf("get blob = %q", r.stdout)
	}
	// A fenced key refuses an unfenced write with the store's exact message.
	tok := strings.TrimSpace(strings.TrimPrefix(kv("", "set", "lock1", "me", "--nex", "--px", "30s").stdout, "OK "))
	if r := kv("", "set", "guarded", "v1", "--fence", tok); r.code != 0 {
		t.Fatalf("fenced set: %+v", r)
	}
	if r := kv("", "set", "guarded", "v2"); r.code != exitFailed || !strings.Contains(r.stderr, "a fencing token is required for this request") {
		t.Fatalf("unfenced write to a fenced key: %+v", r)
	}
	if r := kv("", "vdel", "lock1", "other"); r.code != 1 || !strings.Contains(r.stderr, "value differs") {
		t.Fatalf("vdel wrong value: %+v", r)
	}
	if r := kv("", "vdel", "lock1", "me"); r.code != 0 || r.stdout != "deleted\n" {
		t.Fatalf("vdel: %+v", r)
	}
	if r := kv("", "del", "greeting"); r.code != 0 || r.stdout != "deleted\n" {
		t.Fatalf("del: %+v", r)
	}
	if r := kv("", "get", "greeting"); r.code != 1 || !strings.Contains(r.stderr, "greeting: not found") {
		t.Fatalf("get after del: %+v", r)
	}
	if r := kv("", "del", "greeting"); r.code != 1 {
		t.Fatalf("del of an absent key: %+v", r)
	}
	if r := kv("", "get"); r.code != 2 {
		t.Fatalf("get without a key: %+v", r)
	}
}

func TestKVConnectionErrorSaysWhere(t *testing.T) {
	r := runCLI(t, "", "kv", "--broker", "127.0.0.1:1", "--timeout", "300ms", "get", "k")
	if r.code != exitFailed || !strings.Contains(r.stderr, "connecting to mqtt://127.0.0.1:1") {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, "", "kv", "--broker", "nohostport", "get", "k"); r.code != 2 || !strings.Contains(r.stderr, "want HOST:PORT") {
		t.Fatalf("%+v", r)
	}
}

// start runs a long-running command until the returned stop is called.
func start(t *testing.T, args ...string) (*testutil.Buffer, *testutil.Buffer, func() int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	out, errw := &testutil.Buffer{}, &testutil.Buffer{}
	done := make(chan int, 1)
	go func() { done <- run(ctx, args, strings.NewReader(""), out, errw) }()
	stopped := false
	var code int
	stop := func() int {
		if !stopped {
			stopped = true
			cancel()
			select {
			case code = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("%v did not stop; stderr:\n%s", args, errw.String())
			}
		}
		return code
	}
	t.Cleanup(func() { stop() })
	return out, errw, stop
}

func waitOutput(t *testing.T, w *testutil.Buffer, re *regexp.Regexp) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if m := re.FindStringSubmatch(w.String()); m != nil {
			return m
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no output matching %s; got:\n%s", re, w.String())
	return nil
}

func TestKVWatchPrintsChanges(t *testing.T) {
	b := brokertest.Start(t)
	out, errw, stop := start(t, "kv", "watch", "w1", "w2", "--broker", b.Addr())
	waitOutput(t, errw, regexp.MustCompile(`watching 2 key`))
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "w1", "one")
	runCLI(t, "", "kv", "--broker", b.Addr(), "del", "w1")
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "w2", "two")
	waitOutput(t, out, regexp.MustCompile(`SET w2 two`))
	if code := stop(); code != 0 {
		t.Fatalf("watch exit %d", code)
	}
	matchLines(t, out.String(), []*regexp.Regexp{
		regexp.MustCompile(`^\d{15}:\d{5}:StateStore SET w1 one$`),
		regexp.MustCompile(`^\d{15}:\d{5}:StateStore DELETE w1$`),
		regexp.MustCompile(`^\d{15}:\d{5}:StateStore SET w2 two$`),
	})
}

// kv watch starts with each key's value and, after a lost connection comes
// back, prints what changed meanwhile: a key deleted while it was away is
// not left showing its old value.
func TestKVWatchRereadsAfterReconnect(t *testing.T) {
	b := brokertest.Start(t)
	p := testnet.NewProxy(t, b.Addr())
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "k1", "one")
	out, errw, stop := start(t, "kv", "watch", "k1", "k2", "--broker", p.Addr())
	waitOutput(t, errw, regexp.MustCompile(`watching 2 key`))
	waitOutput(t, out, regexp.MustCompile(`(?m)^\d{15}:\d{5}:StateStore SET k1 one\n`))
	p.Cut()
	waitOutput(t, errw, regexp.MustCompile(`connection lost`))
	runCLI(t, "", "kv", "--broker", b.Addr(), "del", "k1")
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "k2", "two")
	p.Heal()
	waitOutput(t, errw, regexp.MustCompile(`re-read 2 key\(s\), 2 changed meanwhile`))
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "k1", "three")
	waitOutput(t, out, regexp.MustCompile(`SET k1 three\n`))
	if code := stop(); code != 0 {
		t.Fatalf("watch exit %d", code)
	}
	matchLines(t, out.String(), []*regexp.Regexp{
		regexp.MustCompile(`^\d{15}:\d{5}:StateStore SET k1 one$`),
		regexp.MustCompile(`^- DELETE k1$`),
		regexp.MustCompile(`^\d{15}:\d{5}:StateStore SET k2 two$`),
		regexp.MustCompile(`^\d{15}:\d{5}:StateStore SET k1 three$`),
	})
}

// `ssrun dev` runs a folder on an embedded broker, prints where and what to
// try, reacts to a change, and hot-reloads an edited rule.
func TestDev(t *testing.T) {
	dir := t.TempDir()
	rule := filepath.Join(dir, "double.lua")
	write := func(factor string) {
		src := `local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  if ev.op == "SET" then ss.set("out", tostring(tonumber(ev.value) * ` + factor + `)) end
end
`
		if err := os.WriteFile(rule, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("2")
	out, errw, stop := start(t, "dev", dir, "--listen", "127.0.0.1:0")
	m := waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set in 30\n`))
	addr := m[1]
	if !strings.Contains(out.String(), "1 rule(s) from "+dir) {
		t.Fatalf("dev banner: %s", out.String())
	}
	runCLI(t, "", "kv", "--broker", addr, "set", "in", "21")
	waitKV(t, addr, "out", "42")
	write("3")
	deadline := time.Now().Add(20 * time.Second)
	for {
		runCLI(t, "", "kv", "--broker", addr, "set", "in", "5")
		if r := runCLI(t, "", "kv", "--broker", addr, "get", "out"); r.stdout == "15\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("edited rule never took over; log:\n%s", errw.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A broken edit is reported with file and line; the old version runs on.
	if err := os.WriteFile(rule, []byte("local x = \nfunction on_event(ev) end end\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, errw, regexp.MustCompile(`reload failed; the previous version keeps running.*double\.lua:2:`))
	runCLI(t, "", "kv", "--broker", addr, "set", "in", "7")
	waitKV(t, addr, "out", "21")
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
	if !strings.Contains(errw.String(), "rule stopped") {
		t.Fatalf("rules not stopped on exit:\n%s", errw.String())
	}
}

func waitKV(t *testing.T, addr, key, want string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := runCLI(t, "", "kv", "--broker", addr, "get", key)
		if r.stdout == want+"\n" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s = %q, want %q", key, r.stdout, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitSummary waits until the batch-summary plugin has summarised
// sensor/1 = 10 (set by the test) in summary/sensors, i.e. the plugin runs;
// if it does not, the test fails with log().
func waitSummary(t *testing.T, addr string, log func() string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(runCLI(t, "", "kv", "--broker", addr, "get", "summary/sensors").stdout, `"sensor/1":10`) {
		if time.Now().After(deadline) {
			t.Fatalf("the plugin did not run; log:\n%s", log())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestBrokerCommand(t *testing.T) {
	out, _, stop := start(t, "broker", "--listen", "127.0.0.1:0", "--quota", "1")
	m := waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))
	if r := runCLI(t, "", "kv", "--broker", m[1], "set", "a", "1"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, "", "kv", "--broker", m[1], "set", "b", "1"); r.code != exitFailed || !strings.Contains(r.stderr, "the quota has been exceeded") {
		t.Fatalf("quota: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
	// --max-bytes bounds the data, not only the key count.
	out, _, stop = start(t, "broker", "--listen", "127.0.0.1:0", "--max-bytes", "4KiB")
	m = waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))
	if r := runCLI(t, strings.Repeat("v", 3000), "kv", "--broker", m[1], "set", "a", "-"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, strings.Repeat("v", 3000), "kv", "--broker", m[1], "set", "b", "-"); r.code != exitFailed || !strings.Contains(r.stderr, "the quota has been exceeded") {
		t.Fatalf("byte quota: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
	if r := runCLI(t, "", "broker", "--max-bytes", "lots"); r.code != 2 || !strings.Contains(r.stderr, `bad size "lots"`) {
		t.Fatalf("bad --max-bytes: %+v", r)
	}
	if r := runCLI(t, "", "broker", "--client-queue-len", "-1"); r.code != 2 || !strings.Contains(r.stderr, "must be positive") {
		t.Fatalf("bad --client-queue-len: %+v", r)
	}
	if r := runCLI(t, "", "broker", "--max-keep-alive", "0s"); r.code != 2 || !strings.Contains(r.stderr, "--max-keep-alive 0s: must be from 1s to 65535s") {
		t.Fatalf("bad --max-keep-alive: %+v", r)
	}
	// --connect-timeout closes a socket that never sends CONNECT.
	out, _, stop = start(t, "broker", "--listen", "127.0.0.1:0", "--connect-timeout", "100ms")
	m = waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))
	nc, err := net.Dial("tcp", m[1])
	if err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("silent socket: read %v, want EOF (closed by the broker)", err)
	}
	nc.Close()
	if code := stop(); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
	// Off loopback without credentials it refuses to start.
	if r := runCLI(t, "", "broker", "--listen", "0.0.0.0:0"); r.code == 0 || !strings.Contains(r.stderr, "insecure") {
		t.Fatalf("open broker on 0.0.0.0: %+v", r)
	}
}

// `ssrun broker --data DIR` keeps keys across a restart and refuses a
// second broker on DIR; without --data it says keys live in memory.
func TestBrokerData(t *testing.T) {
	out, _, stop := start(t, "broker", "--listen", "127.0.0.1:0")
	waitOutput(t, out, regexp.MustCompile(`keys in memory only, lost when it stops \(--data DIR keeps them\)\n`))
	stop()

	dir := t.TempDir()
	out, _, stop = start(t, "broker", "--listen", "127.0.0.1:0", "--data", dir)
	addr := waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))[1]
	waitOutput(t, out, regexp.MustCompile(`keys kept in `+regexp.QuoteMeta(dir)+` \(fsync always\)\n`))
	set := runCLI(t, "", "kv", "--broker", addr, "set", "k", "kept")
	if set.code != 0 {
		t.Fatalf("set: %+v", set)
	}
	if r := runCLI(t, "", "broker", "--listen", "127.0.0.1:0", "--data", dir); r.code != 2 || !strings.Contains(r.stderr, "in use by another broker") {
		t.Fatalf("second broker on the same --data: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
	out, _, _ = start(t, "broker", "--listen", "127.0.0.1:0", "--data", dir, "--fsync", "interval", "--fsync-interval", "10ms")
	addr = waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))[1]
	if r := runCLI(t, "", "kv", "--broker", addr, "get", "k"); r.code != 0 || r.stdout != "kept\n" {
		t.Fatalf("get after restart: %+v", r)
	}
	for _, args := range [][]string{{"--fsync", "sometimes"}, {"--fsync-interval", "0s"}, {"--snapshot-bytes", "-1"}, {"--snapshot-bytes", "lots"}} {
		if r := runCLI(t, "", append([]string{"broker", "--listen", "127.0.0.1:0", "--data", t.TempDir()}, args...)...); r.code != 2 || !strings.Contains(r.stderr, args[0]) {
			t.Fatalf("%q: %+v", args, r)
		}
	}
}

func TestPasswdAndAuthenticatedBroker(t *testing.T) {
	r := runCLI(t, "s3cret\n", "passwd", "alice")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	user, hash, ok := strings.Cut(strings.TrimSpace(r.stdout), ":")
	if !ok || user != "alice" || bcrypt.CompareHashAndPassword([]byte(hash), []byte("s3cret")) != nil {
		t.Fatalf("passwd printed %q", r.stdout)
	}
	dir := t.TempDir()
	users := filepath.Join(dir, "users.txt")
	pw := filepath.Join(dir, "pw")
	os.WriteFile(users, []byte(r.stdout), 0o600)
	os.WriteFile(pw, []byte("s3cret\n"), 0o600)
	out, _, _ := start(t, "broker", "--listen", "127.0.0.1:0", "--passwords", users)
	addr := waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))[1]
	if r := runCLI(t, "", "kv", "--broker", addr, "--username", "alice", "--password-file", pw, "set", "k", "v"); r.code != 0 {
		t.Fatalf("authenticated set: %+v", r)
	}
	if r := runCLI(t, "", "kv", "--broker", addr, "get", "k"); r.code != exitUnauthorized || !strings.Contains(r.stderr, "0x86") {
		t.Fatalf("anonymous client on a password broker: %+v", r)
	}
	// A name the password file would read back as another (" alice" is
	// read "alice"; "#alice" is a comment) is refused.
	for _, name := range []string{"a:b", " alice", "alice ", "#alice", ""} {
		if r := runCLI(t, "s3cret\n", "passwd", name); r.code != 2 {
			t.Fatalf("passwd %q: %+v", name, r)
		}
	}

	// `ssrun dev --passwords` connects its own rules host (it could not
	// before: the host had no credentials), and a client without them is
	// still refused.
	rules := t.TempDir()
	os.WriteFile(filepath.Join(rules, "double.lua"), []byte(`local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  if ev.op == "SET" then ss.set("out", tostring(tonumber(ev.value) * 2)) end
end
`), 0o644)
	dout, _, _ := start(t, "dev", rules, "--listen", "127.0.0.1:0", "--passwords", users)
	daddr := waitOutput(t, dout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	if r := runCLI(t, "", "kv", "--broker", daddr, "--username", "alice", "--password-file", pw, "set", "in", "21"); r.code != 0 {
		t.Fatalf("authenticated set on dev: %+v", r)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := runCLI(t, "", "kv", "--broker", daddr, "--username", "alice", "--password-file", pw, "get", "out")
		if r.stdout == "42\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the rule never wrote out: %+v", r)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := runCLI(t, "", "kv", "--broker", daddr, "--username", "ssrun-dev", "get", "out"); r.code != exitUnauthorized || !strings.Contains(r.stderr, "0x86") {
		t.Fatalf("the dev host's user without its password: %+v", r)
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.lua")
	bad := filepath.Join(dir, "bad.lua")
	other := filepath.Join(dir, "notes.txt")
	plugin := filepath.Join(dir, "myplugin")
	os.WriteFile(good, []byte("local ss = require('ssrun')\nfunction on_event(ev) end\n"), 0o644)
	os.WriteFile(bad, []byte("function on_event(ev)\n  if then\nend\n"), 0o644)
	os.WriteFile(other, []byte("hi"), 0o644)
	os.WriteFile(plugin, []byte("#!/bin/sh\n"), 0o644)
	r := runCLI(t, "", "check", good, bad, other, plugin)
	if r.code != 1 {
		t.Fatalf("%+v", r)
	}
	if r.stdout != "ok "+good+"\n" {
		t.Errorf("stdout %q", r.stdout)
	}
	if !strings.Contains(r.stderr, bad+":2:") || !strings.Contains(r.stderr, other+": not a rule file") ||
		!strings.Contains(r.stderr, "chmod +x "+plugin) || !strings.Contains(r.stderr, "3 of 4 check(s) failed") {
		t.Errorf("stderr:\n%s", r.stderr)
	}
	if r := runCLI(t, "", "check", "../../examples/thermostat/thermostat.lua"); r.code != 0 {
		t.Fatalf("the example does not check: %+v", r)
	}
}

func TestUnknownCommandAndLogLevel(t *testing.T) {
	if r := runCLI(t, "", "frobnicate"); r.code != 2 || !strings.Contains(r.stderr, "unknown command") {
		t.Fatalf("%+v", r)
	}
	if r := runCLI(t, "", "--log-level", "loud", "check", "x.lua"); r.code != 2 || !strings.Contains(r.stderr, "--log-level") {
		t.Fatalf("%+v", r)
	}
}

// A plugin named in ssrun.yaml, outside the rules folder, is started with its
// checksum verified; a wrong checksum keeps it from running and says why.
func TestDevRunsPluginNamedInConfig(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "batch-summary")
	if err := gobuild.Exe(bin, "../../examples/batch-summary"); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	rules := t.TempDir()
	config := func(hexsum string) string {
		return writeFile(t, "ssrun.yaml", "plugins:\n  summary:\n    path: "+bin+"\n    sha256: "+hexsum+"\n")
	}

	out, errw, stop := start(t, "dev", rules, "--listen", "127.0.0.1:0", "--config", config(hex.EncodeToString(sum[:])))
	addr := waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	runCLI(t, "", "kv", "--broker", addr, "set", "sensor/1", "10")
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := runCLI(t, "", "kv", "--broker", addr, "get", "summary/sensors")
		if strings.Contains(r.stdout, `"sensor/1":10`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no summary from the configured plugin; log:\n%s", errw.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d", code)
	}

	_, errw, stop = start(t, "dev", rules, "--listen", "127.0.0.1:0", "--config", config(strings.Repeat("0", 64)))
	waitOutput(t, errw, regexp.MustCompile(`rule not loaded.*batch-summary.*`+regexp.QuoteMeta(hex.EncodeToString(sum[:]))))
	stop()

	// Without a pinned checksum, a rebuilt binary is hot-reloaded like a
	// rule in the folder.
	unpinned := writeFile(t, "ssrun.yaml", "plugins:\n  summary:\n    path: "+bin+"\n")
	out, errw, stop = start(t, "dev", rules, "--listen", "127.0.0.1:0", "--config", unpinned)
	addr = waitOutput(t, out, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	v2 := bin + ".v2"
	if err := gobuild.Exe(v2, "../../examples/batch-summary", "-X main.version=v2"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(v2, bin); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for i := 0; ; i++ {
		runCLI(t, "", "kv", "--broker", addr, "set", "sensor/2", strconv.Itoa(i))
		if r := runCLI(t, "", "kv", "--broker", addr, "get", "summary/sensors"); strings.Contains(r.stdout, `"version":"v2"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebuilt plugin never took over; log:\n%s", errw.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	stop()
}

// matchLines checks that out has one line per pattern, each matching its
// pattern.
func matchLines(t *testing.T, out string, want []*regexp.Regexp) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("printed:\n%s", out)
	}
	for i, re := range want {
		if !re.MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}
}
