package host

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"path"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/bmatcuk/doublestar/v4"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/gate"
	"github.com/ssrun/ssrun/host/internal/guard"
	"github.com/ssrun/ssrun/host/internal/loadretry"
	"github.com/ssrun/ssrun/host/internal/ruletimers"
	"github.com/ssrun/ssrun/host/internal/timers"
)

// RuleConfig holds the limits and permissions of one rule. The zero value
// is the documented default: DefaultCallTimeout, DefaultGrace,
// DefaultMemoryBytes, DefaultMaxValueBytes, DefaultMailbox, DefaultLogLines,
// DefaultLogBytes, DefaultMaxTimers, and every key allowed.
//
// In ssrun.yaml (under defaults, or a rule's name or glob under rules):
//
//	timeout: 1s        # Timeout
//	grace: 5s          # Grace
//	memory: 64MiB      # MemoryBytes
//	max_value: 1MiB    # MaxValueBytes
//	mailbox: 1024      # Mailbox
//	mailbox_keys: 65536  # MailboxKeys
//	mode: queued       # Mode: queued | latest | restart
//	concurrency: 1     # Concurrency: 1..MaxConcurrency
//	log_lines: 100     # LogLines, per second
//	log_bytes: 64KiB   # LogBytes, per second
//	max_timers: 10000  # MaxTimers
//	rescan: 10s        # Rescan (0: RescanOff)
//	max_watched_keys: 10000  # MaxWatchedKeys
//	read: [...]        # Read, Write, Watch, Lock
//	canary: {events: 20, duration: 30s, tolerance: 0.01, ignore: [...]}  # Canary
type RuleConfig struct {
	// Timeout bounds each handler call (and the rule's initialisation).
	Timeout time.Duration
	// Grace is how long the host waits, past a call's deadline (or past
	// the moment it cancelled the call, when it removes the rule or
	// stops), for the runtime to return. A call still running then is
	// stuck: when the host needs the rule (reload, remove, shutdown) it
	// abandons the call, reports it (log, RuleStatus, Stats.Stuck) and goes
	// on without it; a remove or shutdown releases the rule's watches and
	// locks, a reload installs the new version in the rule's place. Loading
	// is bounded the same way (see Config.LoadTimeout).
	Grace time.Duration
	// MemoryBytes caps the rule's memory (see abi.Limits).
	MemoryBytes int64
	// MaxValueBytes refuses set/vdel values larger than this (TOO_LARGE).
	MaxValueBytes int
	// Mailbox is how many events may wait for the rule before its mailbox
	// conflates by key: a change of a key replaces the key's waiting event
	// (RuleStatus.Coalesced; the event's abi.Event.Coalesced says how many
	// it replaced), and a change of another key waits while fewer than
	// MailboxKeys events do; past that it is dropped (RuleStatus.Dropped).
	Mailbox int
	// MailboxKeys bounds the events waiting in a full mailbox, so the
	// distinct keys it conflates: about 1 KiB each with a small value, as
	// measured (the event, its lineage and what it keeps of the
	// notification it came in); 64 MiB at the default.
	MailboxKeys int
	// Mode is how the mailbox treats a key's changes: ModeQueued (the
	// default, "") hands the rule every change in order and conflates by
	// key only when the mailbox is full; ModeLatest always conflates, so a
	// rule never handles a change of a key that a newer one already
	// replaced while it waited; ModeRestart conflates as latest does and a
	// key's new change also cuts the running call of the same key (see
	// restart.go).
	Mode string
	// Concurrency is how many events of different keys the rule handles at
	// once (1, the default, when zero; at most MaxConcurrency): one key's
	// events are still handled in order, one at a time, under every mode.
	// It is for rules whose handlers wait (plugins, locks). A rule with
	// concurrency N runs N instances of its version (see concurrency.go):
	// N Lua states or WebAssembly instances, each with its own memory of up
	// to MemoryBytes, or N plugin processes; the host's bound on
	// concurrent calls (Config.MaxConcurrentCalls) holds across all rules.
	// It cannot be combined with Canary.
	Concurrency int
	// LogLines and LogBytes are the rule's log budget: how many lines, and
	// how many bytes of message, it may log per second (a line longer than
	// LogBytes is cut to it). The excess is dropped, counted in RuleStatus
	// and summarised in one line per second ("rule x: N lines / M bytes
	// suppressed"). It applies to everything a rule logs through
	// abi.Host.Log: log calls, Lua's print, WebAssembly and plugin output.
	LogLines int
	LogBytes int
	// MaxTimers is how many timers the rule may have armed at once; arming
	// one more fails with QUOTA (re-arming an armed name always works).
	// Each costs about 200 bytes in the host and three keys' worth of
	// store (its record, a share of its index shard).
	MaxTimers int
	// Rescan is how often the patterns the rule watches (watch_pattern)
	// are scanned again for keys created since (DefaultRescan when zero;
	// RescanOff: only when watched, reloaded and after a reconnection). A
	// key a rule of the same host writes is found at once either way.
	Rescan time.Duration
	// MaxWatchedKeys bounds the keys the rule's patterns cover
	// (DefaultMaxWatchedKeys when zero): a watch_pattern matching more
	// fails with LIMIT; keys found later past it are not watched, logged
	// and counted (PatternStats.OverLimit).
	MaxWatchedKeys int
	// Key permissions: glob patterns (doublestar syntax: `*` stays within a
	// `/` segment, `**` crosses them). A nil list allows every key; an empty
	// list allows none. A lease writes its key, so lock and unlock need the
	// name allowed by both Lock and Write.
	Read  []string
	Write []string
	Watch []string
	Lock  []string
	// Canary, when on, makes a reload of the rule a canary reload (see
	// canary.go): the new version runs in shadow until it is proven or
	// refused. Off (the zero value) a reload swaps at once.
	Canary Canary
	// Ownership, in a group of hosts (Config.Group), is "" (the default:
	// the rule runs on one host of the group at a time) or
	// OwnershipEveryHost (it runs on every host, unfenced by the group).
	// In ssrun.yaml: ownership: every-host.
	Ownership string
}

// Defaults for zero RuleConfig fields.
const (
	DefaultCallTimeout   = abi.DefaultCallTimeout
	DefaultMemoryBytes   = abi.DefaultMemoryBytes
	DefaultMaxValueBytes = 1 << 20
	DefaultMailbox       = 1024
	DefaultMailboxKeys   = 65536
	DefaultGrace         = 5 * time.Second
	DefaultLogLines      = 100
	DefaultLogBytes      = 64 << 10
	DefaultMaxTimers     = 10000
	DefaultConcurrency   = 1
	// MaxConcurrency bounds RuleConfig.Concurrency: a rule of 64 instances
	// already fills the host's default bound on concurrent calls.
	MaxConcurrency = 64
)

// Pattern watch settings (RuleConfig.Rescan, RuleConfig.MaxWatchedKeys).
const (
	// DefaultRescan is how often a pattern is scanned again for keys
	// created since.
	DefaultRescan = 10 * time.Second
	// RescanOff in RuleConfig.Rescan scans a pattern only when it is
	// watched (and on a reload or reconnection): `rescan: 0` in ssrun.yaml.
	RescanOff time.Duration = -1
	// DefaultMaxWatchedKeys bounds the keys a rule's patterns cover.
	DefaultMaxWatchedKeys = 10_000
)

// ReservedPrefix starts every key the host keeps for itself (timers). A
// rule's get, set, del, vdel, watch, unwatch, lock and unlock of such a key
// fail with DENIED, whatever its permissions allow.
const ReservedPrefix = timers.ReservedPrefix

// MaxTimerName is the longest timer name, in bytes (it is part of a key).
const MaxTimerName = timers.MaxTimerName

// TimerLateTolerance is how long after its deadline a timer's event may
// reach the rule's handler and still not be marked late. A timer found past
// its deadline when its rule loads (the host was down) is always late.
const TimerLateTolerance = ruletimers.LateTolerance

// DefaultLoadRetry is the first wait before a rule file whose start failed
// is loaded again (Config.LoadRetry when zero); MaxLoadRetry the longest
// wait between two retries of a file.
const (
	DefaultLoadRetry = loadretry.Default
	MaxLoadRetry     = loadretry.Max
)

// DefaultMaxConcurrentCalls bounds the handler calls a host runs at once
// (Config.MaxConcurrentCalls when zero); internal/gate says why 64.
const DefaultMaxConcurrentCalls = gate.DefaultMax

// Validate checks the patterns and numbers and says which is wrong.
func (c RuleConfig) Validate() error {
	if c.Timeout < 0 || c.Grace < 0 || c.MemoryBytes < 0 || c.MaxValueBytes < 0 || c.Mailbox < 0 || c.MailboxKeys < 0 || c.LogLines < 0 || c.LogBytes < 0 || c.MaxTimers < 0 ||
		c.MaxWatchedKeys < 0 || (c.Rescan < 0 && c.Rescan != RescanOff) {
		return fmt.Errorf("timeout, grace, memory, max_value, mailbox, mailbox_keys, log_lines, log_bytes, max_timers, rescan and max_watched_keys must not be negative")
	}
	if err := c.Canary.validate(); err != nil {
		return err
	}
	if c.Mode != "" && c.Mode != ModeQueued && c.Mode != ModeLatest && c.Mode != ModeRestart {
		return fmt.Errorf("mode: %q is not a choice: say %q (the default), %q or %q", c.Mode, ModeQueued, ModeLatest, ModeRestart)
	}
	if c.Concurrency < 0 || c.Concurrency > MaxConcurrency {
		return fmt.Errorf("concurrency: %d is out of range: say 1 (the default) to %d", c.Concurrency, MaxConcurrency)
	}
	if err := c.checkConcurrency(); err != nil {
		return err
	}
	if c.Ownership != "" && c.Ownership != OwnershipEveryHost {
		return fmt.Errorf("ownership: %q is not a choice: leave it out (one host of the group) or say %q", c.Ownership, OwnershipEveryHost)
	}
	for name, list := range map[string][]string{"read": c.Read, "write": c.Write, "watch": c.Watch, "lock": c.Lock} {
		for _, p := range list {
			if !doublestar.ValidatePattern(p) {
				return fmt.Errorf("%s: bad key pattern %q", name, p)
			}
		}
	}
	return nil
}

// ruleDefaults are the values of a RuleConfig's zero fields.
var ruleDefaults = RuleConfig{
	Timeout:        DefaultCallTimeout,
	MemoryBytes:    DefaultMemoryBytes,
	MaxValueBytes:  DefaultMaxValueBytes,
	Mailbox:        DefaultMailbox,
	MailboxKeys:    DefaultMailboxKeys,
	Grace:          DefaultGrace,
	LogLines:       DefaultLogLines,
	LogBytes:       DefaultLogBytes,
	MaxTimers:      DefaultMaxTimers,
	Rescan:         DefaultRescan,
	MaxWatchedKeys: DefaultMaxWatchedKeys,
	Concurrency:    DefaultConcurrency,
}

// withDefaults returns c with its zero numbers set to their defaults.
func (c RuleConfig) withDefaults() RuleConfig { return ruleDefaults.merge(c) }

func (c RuleConfig) limits() abi.Limits {
	return abi.Limits{CallTimeout: c.Timeout, MemoryBytes: c.MemoryBytes}
}

// merge overlays the non-zero fields of o on c (cmp.Or: the first that is
// not zero).
func (c RuleConfig) merge(o RuleConfig) RuleConfig {
	c.Timeout = cmp.Or(o.Timeout, c.Timeout)
	c.Grace = cmp.Or(o.Grace, c.Grace)
	c.MemoryBytes = cmp.Or(o.MemoryBytes, c.MemoryBytes)
	c.MaxValueBytes = cmp.Or(o.MaxValueBytes, c.MaxValueBytes)
	c.Mailbox = cmp.Or(o.Mailbox, c.Mailbox)
	c.MailboxKeys = cmp.Or(o.MailboxKeys, c.MailboxKeys)
	c.Mode = cmp.Or(o.Mode, c.Mode)
	c.Concurrency = cmp.Or(o.Concurrency, c.Concurrency)
	c.LogLines = cmp.Or(o.LogLines, c.LogLines)
	c.LogBytes = cmp.Or(o.LogBytes, c.LogBytes)
	c.MaxTimers = cmp.Or(o.MaxTimers, c.MaxTimers)
	c.Rescan = cmp.Or(o.Rescan, c.Rescan)
	c.MaxWatchedKeys = cmp.Or(o.MaxWatchedKeys, c.MaxWatchedKeys)
	if o.Read != nil {
		c.Read = o.Read
	}
	if o.Write != nil {
		c.Write = o.Write
	}
	if o.Watch != nil {
		c.Watch = o.Watch
	}
	if o.Lock != nil {
		c.Lock = o.Lock
	}
	if !o.Canary.zero() {
		c.Canary = o.Canary
	}
	if o.Ownership != "" {
		c.Ownership = o.Ownership
	}
	return c
}

// allowed reports whether key matches one of patterns (nil allows all).
func allowed(patterns []string, key string) bool { return guard.Allowed(patterns, key) }

// patternReadable reports whether a rule with cfg may get key through a
// pattern: it may read and watch it, and it is not the host's.
func patternReadable(cfg RuleConfig, key string) bool {
	return !hasReservedPrefix(key) && allowed(cfg.Read, key) && allowed(cfg.Watch, key)
}

// hasReservedPrefix reports whether key is the host's own.
func hasReservedPrefix(key string) bool { return strings.HasPrefix(key, ReservedPrefix) }

// ruleConfigFor returns the settings for the rule file at p: defaults, then
// every entry of rules whose pattern matches the file's base name, in
// sorted pattern order, then the entry named exactly like the file.
func ruleConfigFor(defaults RuleConfig, rules map[string]RuleConfig, p string) RuleConfig {
	base := path.Base(p)
	c := defaults
	pats := make([]string, 0, len(rules))
	for pat := range rules {
		if ok, _ := path.Match(pat, base); ok && pat != base {
			pats = append(pats, pat)
		}
	}
	sort.Strings(pats) // deterministic when globs overlap
	for _, pat := range pats {
		c = c.merge(rules[pat])
	}
	if rc, ok := rules[base]; ok {
		c = c.merge(rc)
	}
	return c.withDefaults()
}

// loadableConfigFor returns the settings of the rule file at path, or an
// error if the entries matching it combine into settings that no entry
// holds alone and a load refuses (concurrency from one, a canary from
// another). Load, ssrun check and a live change of the settings all ask it.
func loadableConfigFor(defaults RuleConfig, rules map[string]RuleConfig, path string) (RuleConfig, error) {
	cfg := ruleConfigFor(defaults, rules, path)
	if err := cfg.checkConcurrency(); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}

// validateRuleConfigs checks defaults and every per-rule entry, naming the
// entry that is wrong.
func validateRuleConfigs(defaults RuleConfig, rules map[string]RuleConfig) error {
	if err := defaults.Validate(); err != nil {
		return fmt.Errorf("host: defaults: %w", err)
	}
	for name, rc := range rules {
		if _, err := path.Match(name, ""); err != nil {
			return fmt.Errorf("host: rule %q: bad file name pattern: %w", name, err)
		}
		if err := rc.Validate(); err != nil {
			return fmt.Errorf("host: rule %q: %w", name, err)
		}
		if err := defaults.merge(rc).checkConcurrency(); err != nil { // one set here, the other in defaults
			return fmt.Errorf("host: rule %q: %w", name, err)
		}
	}
	return nil
}

// ValueHeadroom is what a request needs besides its value within the
// broker's maximum packet size (headers, properties, the key, with room to
// spare): a max_value is refused when the broker's maximum packet size less
// this is smaller (see Config.Defaults). A write that does not fit all the
// same (a long key) fails with TOO_LARGE, unsent.
const ValueHeadroom = 64 << 10

// valueLimit is a max_value set in the rule settings: by defaults or by
// the entry of a rule file name or glob.
type valueLimit struct {
	entry string // "defaults", or the rules: entry
	bytes int
}

// valueLimits lists the max_value settings of defaults and rules that are
// set (the default of 1 MiB is not listed), in entry order.
func valueLimits(defaults RuleConfig, rules map[string]RuleConfig) []valueLimit {
	var out []valueLimit
	if defaults.MaxValueBytes != 0 {
		out = append(out, valueLimit{"defaults", defaults.MaxValueBytes})
	}
	for _, name := range slices.Sorted(maps.Keys(rules)) {
		if b := rules[name].MaxValueBytes; b != 0 {
			out = append(out, valueLimit{name, b})
		}
	}
	return out
}

// uncarried returns the limits a broker whose maximum packet size is
// maxPacket (0: none) cannot carry: a value that large would not fit in
// its packet.
func uncarried(limits []valueLimit, maxPacket int) []valueLimit {
	var out []valueLimit
	for _, l := range limits {
		if maxPacket > 0 && l.bytes > maxPacket-ValueHeadroom {
			out = append(out, l)
		}
	}
	return out
}

// checkCarried refuses the max_value settings a broker whose maximum
// packet size is maxPacket cannot carry, naming each entry and the limits.
func checkCarried(limits []valueLimit, maxPacket int) error {
	var errs []error
	for _, l := range uncarried(limits, maxPacket) {
		errs = append(errs, fmt.Errorf("host: %s: max_value of %d bytes is more than the broker can carry: its maximum packet size is %d bytes, which leaves at most %d bytes for a value",
			entryName(l.entry), l.bytes, maxPacket, maxPacket-ValueHeadroom))
	}
	return errors.Join(errs...)
}

// entryName names an entry of the rule settings in errors.
func entryName(entry string) string {
	if entry == "defaults" {
		return entry
	}
	return fmt.Sprintf("rule %q", entry)
}

// UnmatchedRules returns the names and globs of rules (as in Config.Rules)
// that match none of files (rule file base names), sorted: most likely a
// typo in ssrun.yaml, since their settings apply to no rule.
func UnmatchedRules(rules map[string]RuleConfig, files []string) []string {
	var out []string
	for pat := range rules {
		if !slices.ContainsFunc(files, func(f string) bool {
			ok, _ := path.Match(pat, path.Base(f))
			return ok
		}) {
			out = append(out, pat)
		}
	}
	sort.Strings(out)
	return out
}

// RuleConfigFor returns the settings a Host with these Defaults and Rules
// (see Config) gives the rule file at path, zero fields set to their
// defaults: what tools that run rules outside a Host (ssrun test) apply.
func RuleConfigFor(defaults RuleConfig, rules map[string]RuleConfig, path string) RuleConfig {
	return ruleConfigFor(defaults, rules, path)
}

// Allowed reports whether key matches one of the permission patterns of a
// RuleConfig (Read, Write, Watch, Lock); a nil list allows every key.
func Allowed(patterns []string, key string) bool { return allowed(patterns, key) }

// Canary configures canary reloads of a rule. In ssrun.yaml:
//
//	canary:
//	  events: 20        # Events
//	  duration: 30s     # Duration
//	  tolerance: 0.01   # Tolerance
//	  ignore: [stats/*] # Ignore
type Canary struct {
	// Events ends the window after this many events compared (0: no bound).
	Events int
	// Duration ends the window this long after the shadow started (0: no
	// bound). With Events, whichever comes first; with neither, reloads
	// swap at once.
	Duration time.Duration
	// Tolerance is how far two written values that both parse as numbers
	// may differ and still match (absolute; 0: exactly equal).
	Tolerance float64
	// Ignore lists key patterns (as in RuleConfig.Read) whose writes are
	// not compared.
	Ignore []string
}

// on reports whether reloads canary.
func (c Canary) on() bool { return c.Events > 0 || c.Duration > 0 }

// zero reports whether nothing of c is set (merge keeps the default then).
func (c Canary) zero() bool {
	return c.Events == 0 && c.Duration == 0 && c.Tolerance == 0 && c.Ignore == nil
}

func (c Canary) validate() error {
	if c.Events < 0 || c.Duration < 0 || c.Tolerance < 0 || math.IsNaN(c.Tolerance) {
		return fmt.Errorf("canary: events, duration and tolerance must not be negative")
	}
	if !c.zero() && !c.on() {
		return fmt.Errorf("canary: set events or duration (or both): the window would never end")
	}
	for _, p := range c.Ignore {
		if !doublestar.ValidatePattern(p) {
			return fmt.Errorf("canary: ignore: bad key pattern %q", p)
		}
	}
	return nil
}

// checkConcurrency refuses a concurrency above 1 with a canary: a canary
// judges its shadow against the live version event by event, in order,
// which concurrent calls would not keep.
func (c RuleConfig) checkConcurrency() error {
	if c.Concurrency > 1 && c.Canary.on() {
		return fmt.Errorf("concurrency: %d cannot be combined with canary: a canary compares the new version with the live one event by event, in order; say concurrency: 1 or drop canary", c.Concurrency)
	}
	return nil
}

// Modes of RuleConfig.Mode.
const (
	ModeQueued  = "queued"
	ModeLatest  = "latest"
	ModeRestart = "restart"
)

// OwnershipEveryHost in RuleConfig.Ownership runs the rule on every host of
// a group instead of one.
const OwnershipEveryHost = "every-host"
