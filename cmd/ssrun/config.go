package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/yamldoc"
)

// fileConfig is the ssrun.yaml file. Every field is optional.
//
//	broker:                 # connection for `ssrun run` (AIO_* variables and flags override it)
//	  hostname: aio-broker
//	  tcp_port: 18883
//	  use_tls: true
//	  ca_file: /var/run/certs/ca.crt
//	  sat_file: /var/run/secrets/tokens/mq-sat
//	defaults:               # limits and permissions of every rule (host.RuleConfig)
//	  timeout: 1s           # per handler call
//	  grace: 5s             # past a call's deadline, before a stuck call is abandoned
//	  memory: 64MiB
//	  max_value: 1MiB
//	  mailbox: 1024
//	  log_lines: 100        # log budget per second; the excess is counted and summarised
//	  log_bytes: 64KiB
//	  max_timers: 10000     # timers a rule may have armed at once
//	  rescan: 10s           # how often watch_pattern patterns are scanned again (0: only when watched)
//	  max_watched_keys: 10000  # keys a rule's pattern watches may cover
//	rules:                  # per rule file (exact name, or a glob like "*.wasm")
//	  thermostat.lua:
//	    read:  ["thermostat*/**"]
//	    write: ["hvac/**"]
//	    watch: ["thermostat*/setPoint"]
//	    lock:  []
//	    canary:             # reload through a canary (host.Canary): the new version
//	      events: 20        # runs in shadow for 20 events or 30s, whichever first,
//	      duration: 30s     # and goes live only if it writes what the live one does
//	      tolerance: 0.01   # numbers equal within this
//	      ignore: [stats/*] # keys not compared
//	    ownership: every-host  # with run --group: run on every host, not one
type fileConfig struct {
	Broker   connSettings              `yaml:"broker"`
	Defaults ruleSettings              `yaml:"defaults"`
	Rules    map[string]ruleSettings   `yaml:"rules"`
	Plugins  map[string]pluginSettings `yaml:"plugins"`
	path     string
	raw      []byte // the file's content, as read
}

// pluginSettings names a plugin executable outside the rules folder and pins
// its checksum.
type pluginSettings struct {
	Path   string `yaml:"path"`
	SHA256 string `yaml:"sha256"`
}

// ruleSettings is host.RuleConfig as written in YAML (durations like "500ms",
// sizes like "64MiB").
type ruleSettings struct {
	Timeout  duration `yaml:"timeout"`
	Grace    duration `yaml:"grace"`
	Memory   byteSize `yaml:"memory"`
	MaxValue byteSize `yaml:"max_value"`
	Mailbox  int      `yaml:"mailbox"`
	Keys     int      `yaml:"mailbox_keys"`
	Mode     string   `yaml:"mode"`
	// Concurrency is host.RuleConfig.Concurrency.
	Concurrency int      `yaml:"concurrency"`
	LogLines    int      `yaml:"log_lines"`
	LogBytes    byteSize `yaml:"log_bytes"`
	Timers      int      `yaml:"max_timers"`
	// Rescan is host.RuleConfig.Rescan; a pointer, since 0 (never) is
	// not the default.
	Rescan         *duration       `yaml:"rescan"`
	MaxWatchedKeys int             `yaml:"max_watched_keys"`
	Read           *[]string       `yaml:"read"`
	Write          *[]string       `yaml:"write"`
	Watch          *[]string       `yaml:"watch"`
	Lock           *[]string       `yaml:"lock"`
	Canary         *canarySettings `yaml:"canary"`
	// Ownership is host.RuleConfig.Ownership: "every-host" or absent.
	Ownership string `yaml:"ownership"`
}

// canarySettings is host.Canary as written in YAML.
type canarySettings struct {
	Events    int      `yaml:"events"`
	Duration  duration `yaml:"duration"`
	Tolerance float64  `yaml:"tolerance"`
	Ignore    []string `yaml:"ignore"`
}

func (s ruleSettings) toHost() host.RuleConfig {
	list := func(p *[]string) []string {
		if p == nil {
			return nil // absent: every key allowed
		}
		if *p == nil {
			return []string{} // present but empty: no key allowed
		}
		return *p
	}
	var canary host.Canary
	if c := s.Canary; c != nil {
		canary = host.Canary{Events: c.Events, Duration: time.Duration(c.Duration), Tolerance: c.Tolerance, Ignore: c.Ignore}
	}
	var rescan time.Duration
	if s.Rescan != nil {
		if rescan = time.Duration(*s.Rescan); rescan == 0 {
			rescan = host.RescanOff
		}
	}
	return host.RuleConfig{
		Timeout:        time.Duration(s.Timeout),
		Grace:          time.Duration(s.Grace),
		MemoryBytes:    int64(s.Memory),
		MaxValueBytes:  int(s.MaxValue),
		Mailbox:        s.Mailbox,
		MailboxKeys:    s.Keys,
		Mode:           s.Mode,
		Concurrency:    s.Concurrency,
		LogLines:       s.LogLines,
		LogBytes:       int(s.LogBytes),
		MaxTimers:      s.Timers,
		Rescan:         rescan,
		MaxWatchedKeys: s.MaxWatchedKeys,
		Read:           list(s.Read),
		Write:          list(s.Write),
		Watch:          list(s.Watch),
		Lock:           list(s.Lock),
		Canary:         canary,
		Ownership:      s.Ownership,
	}
}

// loadConfig reads and validates an ssrun.yaml. Errors name the file and,
// for YAML errors, the line.
func loadConfig(path string) (*fileConfig, error) {
	b, err := readConfigFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return parseConfig(path, b)
}

// parseConfig decodes and validates the content b of the ssrun.yaml at
// path (named in errors), as loadConfig does.
func parseConfig(path string, b []byte) (*fileConfig, error) {
	var c fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) { // empty file: empty config
		return nil, fmt.Errorf("config %s: %s", path, strings.TrimPrefix(yamlErrors(err).Error(), "yaml: "))
	}
	if err := yamldoc.Rest(dec); err != nil { // else dropped unread, with the settings it holds
		return nil, fmt.Errorf("config %s: %s", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	c.path, c.raw = path, b
	if err := c.Defaults.toHost().Validate(); err != nil {
		return nil, fmt.Errorf("config %s: defaults: %w", path, err)
	}
	for name, r := range c.Rules {
		if err := r.toHost().Validate(); err != nil {
			return nil, fmt.Errorf("config %s: rules: %s: %w", path, name, err)
		}
	}
	for name, p := range c.Plugins {
		if p.Path == "" {
			return nil, fmt.Errorf("config %s: plugins: %s: path is required", path, name)
		}
	}
	return &c, nil
}

func (c *fileConfig) hostRules() map[string]host.RuleConfig {
	out := make(map[string]host.RuleConfig, len(c.Rules))
	for k, v := range c.Rules {
		out[k] = v.toHost()
	}
	return out
}

// duration is a YAML duration: "500ms", "2s", or a bare number of milliseconds.
type duration time.Duration

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = duration(v)
	return nil
}

// parseDuration accepts Go durations ("1.5s", "200ms") and bare integers as
// milliseconds.
func parseDuration(s string) (time.Duration, error) {
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if ms < 0 {
			return 0, fmt.Errorf("duration %q is negative", s)
		}
		if ms > math.MaxInt64/int64(time.Millisecond) { // would wrap around, to a negative or a short duration
			return 0, fmt.Errorf("duration %q is too long (at most %d milliseconds)", s, math.MaxInt64/int64(time.Millisecond))
		}
		return time.Duration(ms) * time.Millisecond, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("bad duration %q (want e.g. 500ms, 2s, or milliseconds)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q is negative", s)
	}
	return d, nil
}

// byteSize is a YAML size: "64MiB", "512KiB", "1MB", or bytes.
type byteSize int64

func (b *byteSize) UnmarshalYAML(n *yaml.Node) error {
	v, err := parseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = byteSize(v)
	return nil
}

func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}
	num, mult := strings.TrimSpace(s), int64(1)
	for _, u := range units {
		if strings.HasSuffix(num, u.suffix) {
			num, mult = strings.TrimSpace(strings.TrimSuffix(num, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q (want e.g. 64MiB, 512KiB or bytes)", s)
	}
	return n * mult, nil
}

// sizeFlag is a command-line size in the units of byteSize; "-1" means
// unlimited and the zero value leaves the default.
type sizeFlag int64

func (f *sizeFlag) String() string {
	if *f == 0 {
		return ""
	}
	return strconv.FormatInt(int64(*f), 10)
}

func (f *sizeFlag) Set(s string) error {
	if strings.TrimSpace(s) == "-1" {
		*f = -1
		return nil
	}
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	if v == 0 {
		return fmt.Errorf("size %q must be positive (or -1 for unlimited)", s)
	}
	*f = sizeFlag(v)
	return nil
}

func (f *sizeFlag) Type() string { return "size" }
