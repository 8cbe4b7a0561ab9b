package host

import (
	"reflect"
	"testing"
	"time"
)

// A zero RuleConfig gets every default; a field set keeps its value, and
// the permissions, the canary and the ownership are left as they are.
func TestRuleConfigWithDefaults(t *testing.T) {
	want := RuleConfig{Timeout: DefaultCallTimeout, MemoryBytes: DefaultMemoryBytes, MaxValueBytes: DefaultMaxValueBytes,
		Mailbox: DefaultMailbox, MailboxKeys: DefaultMailboxKeys, Grace: DefaultGrace, LogLines: DefaultLogLines, LogBytes: DefaultLogBytes, MaxTimers: DefaultMaxTimers,
		Rescan: DefaultRescan, MaxWatchedKeys: DefaultMaxWatchedKeys}
	if got := (RuleConfig{}).withDefaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("zero config: %+v, want %+v", got, want)
	}
	set := RuleConfig{Timeout: time.Second, Grace: 2 * time.Second, MemoryBytes: 3, MaxValueBytes: 4, Mailbox: 5, MailboxKeys: 11, Mode: ModeLatest, LogLines: 6,
		LogBytes: 7, MaxTimers: 8, Rescan: 9 * time.Second, MaxWatchedKeys: 10, Read: []string{}, Write: []string{"w"}, Watch: []string{"a/**"}, Lock: []string{"l"},
		Canary: Canary{Ignore: []string{}}, Ownership: OwnershipEveryHost}
	if got := set.withDefaults(); !reflect.DeepEqual(got, set) {
		t.Fatalf("config with every field set: %+v, want it unchanged %+v", got, set)
	}
}
