package host

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

// A zero RuleConfig gets every default; a field set keeps its value, and
// the permissions, the canary and the ownership are left as they are.
func TestRuleConfigWithDefaults(t *testing.T) {
	want := RuleConfig{Timeout: DefaultCallTimeout, MemoryBytes: DefaultMemoryBytes, MaxValueBytes: DefaultMaxValueBytes,
		Mailbox: DefaultMailbox, MailboxKeys: DefaultMailboxKeys, Grace: DefaultGrace, LogLines: DefaultLogLines, LogBytes: DefaultLogBytes, MaxTimers: DefaultMaxTimers,
		Rescan: DefaultRescan, MaxWatchedKeys: DefaultMaxWatchedKeys, Concurrency: DefaultConcurrency}
	if got := (RuleConfig{}).withDefaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("zero config: %+v, want %+v", got, want)
	}
	set := RuleConfig{Timeout: time.Second, Grace: 2 * time.Second, MemoryBytes: 3, MaxValueBytes: 4, Mailbox: 5, MailboxKeys: 11, Mode: ModeLatest, Concurrency: 12, LogLines: 6,
		LogBytes: 7, MaxTimers: 8, Rescan: 9 * time.Second, MaxWatchedKeys: 10, Read: []string{}, Write: []string{"w"}, Watch: []string{"a/**"}, Lock: []string{"l"},
		Canary: Canary{Ignore: []string{}}, Ownership: OwnershipEveryHost}
	if got := set.withDefaults(); !reflect.DeepEqual(got, set) {
		t.Fatalf("config with every field set: %+v, want it unchanged %+v", got, set)
	}
}

// Concurrency is bounded, and refused with a canary, each with an error
// that names the setting (and, from validateRuleConfigs, the rule).
func TestRuleConfigConcurrency(t *testing.T) {
	for _, c := range []struct {
		cfg  RuleConfig
		want string // "" valid
	}{
		{RuleConfig{Concurrency: 1}, ""},
		{RuleConfig{Concurrency: MaxConcurrency}, ""},
		{RuleConfig{Concurrency: -1}, "concurrency: -1 is out of range: say 1 (the default) to 64"},
		{RuleConfig{Concurrency: MaxConcurrency + 1}, "concurrency: 65 is out of range"},
		{RuleConfig{Concurrency: 2, Canary: Canary{Events: 5}}, "concurrency: 2 cannot be combined with canary"},
		{RuleConfig{Concurrency: 1, Canary: Canary{Events: 5}}, ""},
	} {
		err := c.cfg.Validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.cfg, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: error %v, want %q", c.cfg, err, c.want)
		}
	}
	err := validateRuleConfigs(RuleConfig{Canary: Canary{Duration: time.Minute}}, map[string]RuleConfig{"slow.lua": {Concurrency: 4}})
	if err == nil || !strings.Contains(err.Error(), `rule "slow.lua": concurrency: 4 cannot be combined with canary`) {
		t.Fatalf("canary in defaults, concurrency in the rule: %v", err)
	}
	err = validateRuleConfigs(RuleConfig{}, map[string]RuleConfig{"fast.lua": {Concurrency: 100}})
	if err == nil || !strings.Contains(err.Error(), `rule "fast.lua": concurrency: 100 is out of range`) {
		t.Fatalf("concurrency 100: %v", err)
	}
}
