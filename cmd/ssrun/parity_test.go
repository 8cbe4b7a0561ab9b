package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/testrun"
)

// ssrun test is proof that a rule is right only if it runs what production
// runs. TestParityTestAndDev runs every example's test file and a hostile
// corpus (testdata/parity: a write under the reserved prefix, a 20-hop
// damping chain, a lock wait ending in LOCK_LOST, a loop through TTL
// expiry, a timer across a reload, permission denials, oversize values, a
// full mailbox) under `ssrun test`, where every case must pass, and then
// drives each case against `ssrun dev` on its embedded broker (`ssrun run`
// on `ssrun broker` behind a loopback proxy for a case that takes the store
// down and up), the binaries on random loopback ports, checking each step's
// expectations there too: the same writes (exact and in order, from the
// host's own recording, --record; in ssrun test in order, live as a set:
// see check), the same log lines, the same statuses
// (from the admin endpoint), the same store. What differs by nature is
// normalised on the dev side only: store versions and fencing tokens, the
// host's client id in lock values, and clock readings. Pending timers
// (timers:) are checked under ssrun test only.
//
// Cases whose virtual time runs to minutes (door-alarm, compressor) cannot
// be waited for on a wall clock: they run under ssrun test only, and the
// test says which.
func TestParityTestAndDev(t *testing.T) {
	var files []string
	for _, pat := range []string{"../../examples/*/*.test.yaml", "../../examples/*/rules/*.test.yaml", "testdata/parity/*/*.test.yaml"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 14 {
		t.Fatalf("found %d test files, want the examples' and the 8 of the hostile corpus: %q", len(files), files)
	}
	if r := runBin(t, nil, append([]string{"test", "-v"}, files...)...); r.code != 0 {
		t.Fatalf("ssrun test: %+v", r)
	}
	var live, virtualOnly []string
	for _, path := range files {
		f, err := testrun.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		for i := range f.Cases {
			c := &f.Cases[i]
			name := filepath.Base(filepath.Dir(path)) + "/" + c.Name
			if advanced(c) > 5*time.Second {
				virtualOnly = append(virtualOnly, name)
				continue
			}
			live = append(live, name)
			t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) { runLive(t, path, f, c) })
		}
	}
	t.Logf("against a live host: %d cases; under ssrun test only (virtual time of minutes): %q", len(live), virtualOnly)
	if len(live) < 20 {
		t.Fatalf("only %d cases ran against a live host", len(live))
	}
}

// advanced is the virtual time a case's steps move the clock by.
func advanced(c *testrun.Case) time.Duration {
	var d time.Duration
	for _, s := range c.Steps {
		if s.Advance != "" {
			x, _ := time.ParseDuration(s.Advance)
			d += x
		}
	}
	return d
}

// liveHost is a case's rules on a live host: ssrun dev, or ssrun run on
// ssrun broker through a proxy that can cut the host off the store.
type liveHost struct {
	t      *testing.T
	src    string // the case's folder
	dir    string // the folder the host runs
	p      *proc
	trace  string
	admin  string
	user   *protocol.Client
	proxy  *testnet.Proxy
	marks  int
	writes int // trace writes seen before the step
	lines  int // log lines seen before the step
	start  time.Time
	waited time.Duration // the advance steps so far
	down   bool          // the host is cut off the store: it sees no change, marks neither
}

// markRule logs the marks that end a step (see barrier).
const markRule = `local ss = require("ssrun")
ss.watch("parity/mark")
function on_event(ev) ss.info("parity mark " .. ev.value) end
`

func runLive(t *testing.T, path string, f *testrun.File, c *testrun.Case) {
	h := &liveHost{t: t, src: filepath.Dir(path), dir: t.TempDir(), trace: filepath.Join(t.TempDir(), "live.trace")}
	if b, err := os.ReadFile(filepath.Join(h.src, "ssrun.yaml")); err == nil {
		writeFileAt(t, filepath.Join(h.dir, "ssrun.yaml"), b, 0o644)
	}
	writeFileAt(t, filepath.Join(h.dir, "parity-mark.lua"), []byte(markRule), 0o644)
	common := []string{h.dir, "--admin", "127.0.0.1:0", "--record", h.trace, "--log-format", "json", "--log-level", "debug"}
	var addr string
	if slices.ContainsFunc(c.Steps, func(s testrun.Step) bool { return s.Store != "" }) {
		b := startProc(t, "broker", "--listen", "127.0.0.1:0")
		addr = waitOutput(t, b.stdout, regexp.MustCompile(`listening on (\S+)\n`))[1]
		h.proxy = testnet.NewProxy(t, addr)
		// ssrun run keeps its session (3600 s): notifications queued in it
		// during the outage come back as it resumes, before the client is
		// ready; the client drops them and the host's resync covers the
		// keys (they used to run rules whose writes failed, unredone).
		h.p = startProc(t, append([]string{"run", "--broker", h.proxy.Addr()}, common...)...)
	} else {
		h.p = startProc(t, append([]string{"dev", "--listen", "127.0.0.1:0"}, common...)...)
		addr = waitOutput(t, h.p.stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	}
	h.admin = waitOutput(t, h.p.stdout, regexp.MustCompile(`admin endpoint on http://(\S+) `))[1]
	h.user = keyWatcher(h.ctx(), t, addr, "parity-user")
	h.waitFor("the mark rule", func() bool { _, ok := h.status()["parity-mark.lua"]; return ok })
	for k, v := range c.Store {
		h.must(h.user.Set(h.ctx(), []byte(k), []byte(v), protocol.SetOptions{}))
	}
	var rules []string
	for _, r := range ruleFiles(t, h.src, f) {
		b, err := os.ReadFile(filepath.Join(h.src, r))
		if err != nil {
			t.Fatal(err)
		}
		writeFileAt(t, filepath.Join(h.dir, r), b, 0o755)
		rules = append(rules, r)
	}
	h.waitFor("the rules to load", func() bool {
		st := h.status()
		return !slices.ContainsFunc(rules, func(r string) bool { return st[r].State != "running" })
	})
	h.barrier()
	h.writes, h.lines = len(h.allWrites()), len(h.allLines()) // the rules' start is no step's
	h.start = time.Now()
	for i := range c.Steps {
		s := &c.Steps[i]
		h.act(s)
		h.settle(s)
		h.barrier()
		if diffs := h.check(s.Expect); len(diffs) > 0 {
			t.Fatalf("step %d (%s, line %d), live:\n    %s\nlog of the run:\n%s", i+1, s, s.Line, strings.Join(diffs, "\n    "), h.p.stderr.String())
		}
		h.writes, h.lines = len(h.allWrites()), len(h.allLines())
	}
}

// ruleFiles are the rule files a test file runs: those it names, or the
// folder's rules.
func ruleFiles(t *testing.T, dir string, f *testrun.File) []string {
	if len(f.Rules) > 0 {
		return f.Rules
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		if ext := filepath.Ext(e.Name()); ext == ".lua" || ext == ".wasm" {
			out = append(out, e.Name())
		}
	}
	return out
}

func writeFileAt(t *testing.T, path string, b []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp~"
	if err := os.WriteFile(tmp, b, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil { // whole, as an editor saves
		t.Fatal(err)
	}
}

func (h *liveHost) ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	h.t.Cleanup(cancel)
	return ctx
}

func (h *liveHost) must(_ any, err error) {
	h.t.Helper()
	if err != nil {
		h.t.Fatal(err)
	}
}

// waitFor waits until cond holds, for at most 60 s.
func (h *liveHost) waitFor(what string, cond func() bool) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			h.t.Fatalf("live host: no %s within 60 s; log:\n%s", what, h.p.stderr.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// act does the step's action to the live host.
func (h *liveHost) act(s *testrun.Step) {
	h.t.Helper()
	switch {
	case len(s.Set) > 0:
		for _, kv := range s.Set {
			h.must(h.user.Set(h.ctx(), []byte(kv.Key), []byte(kv.Value), protocol.SetOptions{}))
		}
	case len(s.Delete) > 0:
		for _, k := range s.Delete {
			h.must(h.user.Del(h.ctx(), []byte(k), protocol.DelOptions{}))
		}
	case s.Advance != "":
		d, _ := time.ParseDuration(s.Advance)
		h.waited += d
	case s.Store == "down":
		h.proxy.Cut()
		h.down = true
		h.waitFor("lost connection", func() bool { return strings.Contains(h.p.stderr.String(), "store connection lost") })
	case s.Store == "up":
		h.proxy.Heal()
		h.down = false
	case s.LoseLock != "":
		rule, ttl := h.lock(s.LoseLock)
		lost := h.lockLost(s.LoseLock)
		res, err := h.user.Get(h.ctx(), []byte(s.LoseLock), protocol.CallOptions{})
		h.must(nil, err)
		if !res.Found || strings.HasSuffix(string(res.Value), ":"+rule) && !strings.HasPrefix(string(res.Value), "another-host:") {
			h.must(h.user.Set(h.ctx(), []byte(s.LoseLock), []byte("another-host:lose_lock"), protocol.SetOptions{Expiry: ttl}))
		}
		h.waitFor("LOCK_LOST", func() bool { return h.lockLost(s.LoseLock) > lost })
	case s.Fence != "":
		res, err := h.user.Set(h.ctx(), []byte(s.Fence), []byte("another-host:fence"), protocol.SetOptions{})
		h.must(nil, err)
		for _, k := range h.fenced(s.Fence) {
			g, err := h.user.Get(h.ctx(), []byte(k), protocol.CallOptions{})
			h.must(nil, err)
			if g.Found {
				h.must(h.user.Set(h.ctx(), []byte(k), g.Value, protocol.SetOptions{FencingToken: res.Version}))
			}
		}
	case len(s.Reload) > 0:
		for _, kv := range s.Reload {
			b, err := os.ReadFile(filepath.Join(h.src, kv.Value))
			if err != nil {
				h.t.Fatal(err)
			}
			n := strings.Count(h.p.stderr.String(), `"msg":"rule reloaded"`)
			writeFileAt(h.t, filepath.Join(h.dir, kv.Key), b, 0o644)
			h.waitFor("the reload", func() bool { return strings.Count(h.p.stderr.String(), `"msg":"rule reloaded"`) > n })
		}
	}
}

// settle waits until what the step expects of counts, writes and logs has
// happened (and, after an advance, until that much time has passed since
// the first step): a live host has no idle to wait for.
func (h *liveHost) settle(s *testrun.Step) {
	h.t.Helper()
	until := h.start.Add(h.waited)
	e := s.Expect
	h.waitFor(fmt.Sprintf("effects of step %q", s.String()), func() bool {
		if time.Now().Before(until) {
			return false
		}
		if e == nil {
			return true
		}
		if e.Writes != nil && len(h.stepWrites()) < len(*e.Writes) {
			return false
		}
		st := h.status()
		for name, want := range e.Status {
			if got := st[name]; !want.Match(got.Handled, got.Failed, got.Coalesced, got.Dropped) {
				return false
			}
		}
		lines := h.stepLines()
		for _, l := range e.Logs {
			if !slices.ContainsFunc(lines, func(x string) bool { return strings.Contains(x, normalize(l)) }) {
				return false
			}
		}
		for k, want := range e.Store {
			if h.storeDiff(k, want) != "" {
				return false
			}
		}
		return true
	})
}

// storeDiff says how key differs in the store from want (nil: absent);
// "" when it does not.
func (h *liveHost) storeDiff(key string, want *string) string {
	res, err := h.user.Get(h.ctx(), []byte(key), protocol.CallOptions{})
	switch {
	case err != nil:
		return err.Error()
	case want == nil && res.Found:
		return fmt.Sprintf("store %s: want absent, got %q", key, res.Value)
	case want != nil && !res.Found:
		return fmt.Sprintf("store %s: want %q, got absent", key, *want)
	case want != nil && normalize(string(res.Value)) != normalize(*want):
		return fmt.Sprintf("store %s: want %q, got %q", key, *want, res.Value)
	}
	return ""
}

// barrier writes the next mark and waits for its log line: every line
// logged before it has been read. A host cut off the store logs nothing
// new: there is nothing to wait for.
func (h *liveHost) barrier() {
	h.t.Helper()
	if h.down {
		return
	}
	h.marks++
	mark := fmt.Sprint(h.marks)
	h.must(h.user.Set(h.ctx(), []byte("parity/mark"), []byte(mark), protocol.SetOptions{}))
	h.waitFor("mark "+mark, func() bool { return strings.Contains(h.p.stderr.String(), `"msg":"parity mark `+mark+`"`) })
}

// check compares the step's outcome on the live host with e, as ssrun test
// does (on normalised text).
func (h *liveHost) check(e *testrun.Expect) []string {
	if e == nil {
		return nil
	}
	var out []string
	writes, lines := h.stepWrites(), h.stepLines()
	if e.Writes != nil {
		// The same writes; their order across rules is ssrun test's to
		// check: a live host runs rules in parallel, and records a write
		// when its reply comes, which may be after the write of another
		// rule it caused.
		want := make([]string, len(*e.Writes))
		for i, w := range *e.Writes {
			want[i] = normalize(w)
		}
		got := slices.Clone(writes)
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(want, got) {
			out = append(out, fmt.Sprintf("writes (sorted): want %q, got %q", want, got))
		}
	}
	for k, want := range e.Store {
		if d := h.storeDiff(k, want); d != "" {
			out = append(out, d)
		}
	}
	for _, s := range e.Logs {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, normalize(s)) }) {
			out = append(out, fmt.Sprintf("logs: no line contains %q", normalize(s)))
		}
	}
	for _, s := range e.NoLogs {
		if i := slices.IndexFunc(lines, func(l string) bool { return strings.Contains(l, s) }); i >= 0 {
			out = append(out, fmt.Sprintf("no_logs: %q logged: %s", s, lines[i]))
		}
	}
	st := h.status()
	for name, want := range e.Status {
		if got := st[name]; !want.Match(got.Handled, got.Failed, got.Coalesced, got.Dropped) {
			out = append(out, fmt.Sprintf("status of %s: want %s, got %s", name, want, want.Got(got.Handled, got.Failed, got.Coalesced, got.Dropped)))
		}
	}
	if len(out) > 0 {
		out = append(out, fmt.Sprintf("logged: %q", lines))
	}
	return out
}

// status is the live host's rules, by name.
func (h *liveHost) status() map[string]admin.RuleDoc {
	h.t.Helper()
	resp, err := http.Get("http://" + h.admin + "/status")
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]admin.RuleDoc{}
	if resp.StatusCode != http.StatusOK {
		return out // the host is not up yet
	}
	var doc admin.StatusDoc
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		h.t.Fatal(err)
	}
	for _, r := range doc.Rules {
		out[r.Name] = r
	}
	return out
}

// records are the live host's recording so far.
func (h *liveHost) records() []testrun.Record {
	h.t.Helper()
	b, err := os.ReadFile(h.trace)
	if err != nil {
		h.t.Fatal(err)
	}
	tr, err := testrun.ParseTrace(h.trace, bytes.NewReader(b))
	if err != nil {
		h.t.Fatal(err)
	}
	return tr.Records
}

// allWrites are the writes the store applied for the rules (not the mark
// rule), as ssrun test lists them, normalised.
func (h *liveHost) allWrites() []string {
	var out []string
	for _, r := range h.records() {
		if r.Kind != testrun.RecordCall || r.Status != "OK" || r.Rule == "parity-mark.lua" {
			continue
		}
		switch r.Verb {
		case "set":
			out = append(out, normalize("SET "+r.Key+" "+string(r.Bytes())))
		case "del", "vdel":
			out = append(out, "DEL "+r.Key)
		}
	}
	return out
}

func (h *liveHost) stepWrites() []string { return h.allWrites()[h.writes:] }

// lock returns the rule that last took the lock name, and its ttl.
func (h *liveHost) lock(name string) (rule string, ttl time.Duration) {
	for _, r := range h.records() {
		if r.Kind == testrun.RecordCall && r.Verb == "lock" && r.Key == name && r.Status == "OK" {
			rule, ttl = r.Rule, time.Duration(r.TTLMs)*time.Millisecond
		}
	}
	if rule == "" {
		h.t.Fatalf("lock %q is not held by any rule", name)
	}
	return rule, ttl
}

// lockLost counts the LOCK_LOST events of the lock name.
func (h *liveHost) lockLost(name string) int {
	n := 0
	for _, r := range h.records() {
		if r.Kind == testrun.RecordEvent && r.Op == "LOCK_LOST" && r.Key == name {
			n++
		}
	}
	return n
}

// fenced are the keys written fenced with the lock name, sorted.
func (h *liveHost) fenced(name string) []string {
	var out []string
	for _, r := range h.records() {
		if r.Kind == testrun.RecordCall && r.Fence == name && r.Status == "OK" && !slices.Contains(out, r.Key) {
			out = append(out, r.Key)
		}
	}
	slices.Sort(out)
	return out
}

// allLines are the live host's log lines as ssrun test shows them: "RULE:
// LEVEL: message key=value ...", the rules' own lines at every level and
// the host's from info up, normalised; the mark rule's left out.
func (h *liveHost) allLines() []string {
	var out []string
	for _, raw := range strings.Split(h.p.stderr.String(), "\n") {
		l, ok := logLine(raw)
		if ok && !strings.HasPrefix(l, "parity-mark.lua: ") && !strings.Contains(l, "key=parity/mark") {
			out = append(out, normalize(l))
		}
	}
	return out
}

func (h *liveHost) stepLines() []string { return h.allLines()[h.lines:] }

// logLine formats one JSON log line as the host of ssrun test logs it
// (testrun's engine), keeping the order of its attributes.
func logLine(raw string) (string, bool) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	var level, msg, rule string
	var attrs []string
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return "", false
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return "", false
		}
		switch key := k.(string); {
		case key == "time":
		case key == "level":
			level = strings.ToLower(fmt.Sprint(v))
		case key == "msg":
			msg = fmt.Sprint(v)
		case key == "rule" && rule == "":
			rule = fmt.Sprint(v)
		default:
			attrs = append(attrs, fmt.Sprintf(" %s=%v", key, v))
		}
	}
	own := rule != "" && len(attrs) == 0
	if !own && (level == "debug" || level == "") {
		return "", false
	}
	line := level + ": " + msg + strings.Join(attrs, "")
	if rule != "" {
		line = rule + ": " + line
	}
	return line, true
}

var (
	versionText = regexp.MustCompile(`\d{15}:\d{5}:[\w-]+`)
	holderText  = regexp.MustCompile(`\bssrun-(test|dev-[0-9a-f]{8}|run-[0-9a-f]{8}):`)
	clockText   = regexp.MustCompile(`\b1[78]\d{11}\b`)
)

// normalize replaces what differs between two runs by nature: store
// versions and tokens, the host's client id, clock readings.
func normalize(s string) string {
	s = versionText.ReplaceAllString(s, "<version>")
	s = holderText.ReplaceAllString(s, "<host>:")
	return clockText.ReplaceAllString(s, "<ms>")
}
