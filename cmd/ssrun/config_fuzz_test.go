package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
)

// configSeeds are real ssrun.yaml files: the parity tests' configs.
func configSeeds(f *testing.F) {
	files, err := filepath.Glob("testdata/parity/*/ssrun.yaml")
	if err != nil || len(files) == 0 {
		f.Fatalf("no seed configs: %v", err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// FuzzConfig feeds arbitrary text to the ssrun.yaml parser and then to what
// the CLI does with a config it accepts (ssrun check's SetRuleConfig, the
// settings of each rule, the unmatched-entry messages): it never panics,
// its errors name the file, and what it accepts holds no negative limit.
func FuzzConfig(f *testing.F) {
	configSeeds(f)
	for _, s := range []string{
		// fileConfig's doc comment.
		`broker:
  hostname: aio-broker
  tcp_port: 18883
  use_tls: true
  ca_file: /var/run/certs/ca.crt
  sat_file: /var/run/secrets/tokens/mq-sat
defaults:
  timeout: 1s
  grace: 5s
  memory: 64MiB
  max_value: 1MiB
  mailbox: 1024
  log_lines: 100
  log_bytes: 64KiB
  max_timers: 10000
  rescan: 10s
  max_watched_keys: 10000
rules:
  thermostat.lua:
    read:  ["thermostat*/**"]
    write: ["hvac/**"]
    watch: ["thermostat*/setPoint"]
    lock:  []
    canary:
      events: 20
      duration: 30s
      tolerance: 0.01
      ignore: [stats/*]
    ownership: every-host
plugins:
  p:
    path: ./bin/p
    sha256: ab
`,
		"rules:\n  thermostat.lua:\n    timeout: 2000\n    concurrency: 4\n    mode: latest\n    mailbox_keys: 4096\n",
		"rules:\n  \"*.lua\": {concurrency: 4}\n  a.lua: {canary: {events: 5}}\n",
		"rules:\n  \"[\": {}\n",
		"defaults:\n  rescan: 0\n",
		"defaults:\n  timeout: 9223372036855\n",
		"defaults:\n  memory: 4611686018427387904B\n",
		"defaults:\n  timeot: 1s\n",
		"rules:\n  a.lua:\n    read: [\"a/[\"]\n",
		"plugins:\n  p: {sha256: ab}\n",
		"rules: [\n",
		"a: &a [*a, *a]\n",
		"",
		"---\n---\n",
	} {
		f.Add([]byte(s))
	}
	const path = "conf dir/ssrun.yaml"
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := parseConfig(path, b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config "+path+": ") {
				t.Fatalf("%q: error does not name the file: %v", b, err)
			}
			return
		}
		if c.path != path || string(c.raw) != string(b) {
			t.Fatalf("%q: path %q, raw %q", b, c.path, c.raw)
		}
		defaults, rules := c.Defaults.toHost(), c.hostRules()
		for name, rc := range rules {
			if rc.Timeout < 0 || rc.Grace < 0 || rc.MemoryBytes < 0 || rc.MaxValueBytes < 0 || rc.LogBytes < 0 || rc.Canary.Duration < 0 {
				t.Fatalf("%q: rule %q: negative limit accepted: %+v", b, name, rc)
			}
		}
		// What ssrun check does next (dev and run: host.New, which
		// validates the same way).
		if err := host.NewChecker(nil, 0).SetRuleConfig(defaults, rules); err != nil {
			if !strings.HasPrefix(err.Error(), "host: ") {
				t.Fatalf("%q: SetRuleConfig: %v", b, err)
			}
			return
		}
		files := make([]string, 0, len(rules))
		for name := range rules {
			files = append(files, name)
			// Entries that match a file apart may combine into settings
			// Load refuses (concurrency with a canary); nothing else.
			if err := host.RuleConfigFor(defaults, rules, name).Validate(); err != nil && !strings.Contains(err.Error(), "cannot be combined with canary") {
				t.Fatalf("%q: settings of %q: %v", b, name, err)
			}
		}
		_ = c.pluginPaths()
		for _, msg := range c.unmatchedRules("rules", nil) {
			if !strings.HasPrefix(msg, "config "+path+": ") {
				t.Fatalf("%q: unmatched entry message does not name the file: %s", b, msg)
			}
		}
		_ = c.unmatchedRules("rules", files)
	})
}

// FuzzConfigValue feeds arbitrary text to the parsers of ssrun.yaml's
// durations and sizes: what they accept is not negative, and formatted
// again it parses to the same value.
func FuzzConfigValue(f *testing.F) {
	for _, s := range []string{
		"500ms", "2s", "1.5s", "2000", "0", "-1", "-1s", "1h2m3.5s", "soon", "", " 5s",
		"9223372036854", "9223372036855", "18446744073710", "2562047h47m16.854775807s",
		"64MiB", "512KiB", "1MB", "3GB", "7GiB", "12B", "12", " 64 MiB ", "KiB", "-1KiB", "+5",
		"4611686018427387904", "4611686018427387904B", "4294967296KiB", "lots",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, err := parseDuration(s); err == nil {
			if d < 0 {
				t.Fatalf("parseDuration(%q) = %v, negative", s, d)
			}
			if ms, err := strconv.ParseInt(s, 10, 64); err == nil && time.Duration(ms) != d/time.Millisecond {
				t.Fatalf("parseDuration(%q) = %v, not %d milliseconds", s, d, ms)
			}
			if d2, err := parseDuration(d.String()); err != nil || d2 != d {
				t.Fatalf("parseDuration(%q) = %v, but parseDuration(%q) = %v, %v", s, d, d.String(), d2, err)
			}
			ms := strconv.FormatInt(int64(d/time.Millisecond), 10)
			if d2, err := parseDuration(ms); err != nil || d2 != d.Truncate(time.Millisecond) {
				t.Fatalf("parseDuration(%q) = %v, but parseDuration(%q) = %v, %v", s, d, ms, d2, err)
			}
		} else if !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Fatalf("parseDuration(%q): error does not quote the value: %v", s, err)
		}
		if n, err := parseSize(s); err == nil {
			if n < 0 {
				t.Fatalf("parseSize(%q) = %d, negative", s, n)
			}
			for _, again := range []string{strconv.FormatInt(n, 10), strconv.FormatInt(n, 10) + "B"} {
				if n2, err := parseSize(again); err != nil || n2 != n {
					t.Fatalf("parseSize(%q) = %d, but parseSize(%q) = %d, %v", s, n, again, n2, err)
				}
			}
			if n%(1<<10) == 0 {
				again := strconv.FormatInt(n>>10, 10) + "KiB"
				if n2, err := parseSize(again); err != nil || n2 != n {
					t.Fatalf("parseSize(%q) = %d, but parseSize(%q) = %d, %v", s, n, again, n2, err)
				}
			}
		} else if !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Fatalf("parseSize(%q): error does not quote the value: %v", s, err)
		}
	})
}
