package guard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// unreachable is a next link that must never be called: its nil Host
// panics on any call.
type unreachable struct{ abi.Host }

func guardOf(next abi.Host, closed *bool, denied *[]string) *Host {
	return New(next, Rule{
		Name: "r.lua", Reserved: "$ssrun/", MaxTimer: 8,
		Limits: func() Limits {
			return Limits{Read: []string{"in/**", "both/**"}, Write: []string{"out/**", "both/**"}, Watch: []string{"in/**"},
				Lock: []string{"lock/**", "both/**"}, MaxValueBytes: 4}
		},
		Closed: func() bool { return *closed },
		Denied: func(verb, key string) { *denied = append(*denied, verb+" "+key) },
	})
}

// Every call the guard refuses gets its status and message, and never
// reaches the next link (which would panic).
func TestGuardRefusesBeforeTheNextLink(t *testing.T) {
	ctx := context.Background()
	var closed bool
	var denied []string
	g := guardOf(unreachable{}, &closed, &denied)
	big := []byte("12345")
	cases := []struct {
		name   string
		call   func() error
		status abi.Status
		msg    string
	}{
		{"get empty", func() error { _, err := g.Get(ctx, ""); return err }, abi.StatusInvalid, "get: empty key"},
		{"get reserved", func() error { _, err := g.Get(ctx, "$ssrun/timer/x"); return err }, abi.StatusDenied, "reserved for the host"},
		{"get not readable", func() error { _, err := g.Get(ctx, "out/a"); return err }, abi.StatusDenied, `get "out/a": not permitted for rule r.lua`},
		{"set not writable", func() error { _, err := g.Set(ctx, "in/a", nil, abi.SetOptions{}); return err }, abi.StatusDenied, "not permitted"},
		{"set too large", func() error { _, err := g.Set(ctx, "out/a", big, abi.SetOptions{}); return err }, abi.StatusTooLarge, "value of 5 bytes exceeds the rule's limit of 4"},
		{"set bad cond", func() error { _, err := g.Set(ctx, "out/a", nil, abi.SetOptions{Cond: 9}); return err }, abi.StatusInvalid, "unknown condition 9"},
		{"set short ttl", func() error {
			_, err := g.Set(ctx, "out/a", nil, abi.SetOptions{TTL: time.Microsecond})
			return err
		}, abi.StatusInvalid, "at least 1 ms"},
		{"set negative ttl", func() error { _, err := g.Set(ctx, "out/a", nil, abi.SetOptions{TTL: -1}); return err }, abi.StatusInvalid, "ttl must be"},
		{"del not writable", func() error { return g.Del(ctx, "in/a", abi.DelOptions{}) }, abi.StatusDenied, "not permitted"},
		{"vdel too large", func() error { return g.VDel(ctx, "out/a", big, abi.DelOptions{}) }, abi.StatusTooLarge, "exceeds"},
		{"watch not watchable", func() error { return g.Watch(ctx, "both/a", abi.WatchOptions{}) }, abi.StatusDenied, "not permitted"},
		{"unwatch reserved", func() error { return g.Unwatch(ctx, "$ssrun/x") }, abi.StatusDenied, "reserved"},
		{"lock not lockable", func() error { _, err := g.Lock(ctx, "out/l", time.Second, abi.LockOptions{}); return err }, abi.StatusDenied, "not permitted"},
		{"lock not writable", func() error { _, err := g.Lock(ctx, "lock/l", time.Second, abi.LockOptions{}); return err }, abi.StatusDenied, "a lock writes its key"},
		{"unlock not writable", func() error { return g.Unlock(ctx, "lock/l") }, abi.StatusDenied, "a lock writes its key"},
		{"timer empty", func() error { return g.Timer(ctx, "", 0, abi.TimerOptions{}) }, abi.StatusInvalid, "empty timer name"},
		{"timer long", func() error { return g.Timer(ctx, "123456789", 0, abi.TimerOptions{}) }, abi.StatusInvalid, "longer than 8"},
		{"timer negative", func() error { return g.Timer(ctx, "t", -1, abi.TimerOptions{}) }, abi.StatusInvalid, "must not be negative"},
		{"timer every", func() error { return g.Timer(ctx, "t", 0, abi.TimerOptions{Every: time.Microsecond}) }, abi.StatusInvalid, "at least 1 ms"},
		{"timer payload", func() error { return g.Timer(ctx, "t", 0, abi.TimerOptions{Payload: big}) }, abi.StatusTooLarge, "payload of 5 bytes"},
		{"cancel empty", func() error { return g.Cancel(ctx, "") }, abi.StatusInvalid, "empty timer name"},
		{"keys limit", func() error { _, err := g.Keys(ctx, "in/*", abi.KeysOptions{Limit: -1}); return err }, abi.StatusInvalid, "limit -1"},
		{"keys over max", func() error {
			_, err := g.Keys(ctx, "in/*", abi.KeysOptions{Limit: abi.MaxKeysLimit + 1})
			return err
		}, abi.StatusInvalid, "is not between"},
		{"keys malformed pattern", func() error { _, err := g.Keys(ctx, "in/[", abi.KeysOptions{}); return err }, abi.StatusInvalid, `keys "in/["`},
		{"keys reserved pattern", func() error { _, err := g.Keys(ctx, "$ssrun/*", abi.KeysOptions{}); return err }, abi.StatusDenied, "reserved for the host"},
		{"keys outside read", func() error { _, err := g.Keys(ctx, "out/*", abi.KeysOptions{}); return err }, abi.StatusDenied, "no key it matches can be read"},
		{"watch_pattern outside watch", func() error { return g.WatchPattern(ctx, "both/*", abi.WatchOptions{}) }, abi.StatusDenied, "(rule r.lua)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { refused(t, c.call, c.status, c.msg) })
	}
	want := []string{"get out/a", "set in/a", "del in/a", "watch both/a", "lock out/l"}
	if fmt.Sprint(denied) != fmt.Sprint(want) {
		t.Errorf("told of denials %q, want %q (the permissions', not the reserved prefix's)", denied, want)
	}

	// A version replaced or stopped: every call fails, none goes on.
	closed = true
	for name, call := range map[string]func() error{
		"get":             func() error { _, err := g.Get(ctx, "in/a"); return err },
		"set":             func() error { _, err := g.Set(ctx, "out/a", nil, abi.SetOptions{}); return err },
		"watch":           func() error { return g.Watch(ctx, "in/a", abi.WatchOptions{}) },
		"keys":            func() error { _, err := g.Keys(ctx, "in/*", abi.KeysOptions{}); return err },
		"watch_pattern":   func() error { return g.WatchPattern(ctx, "in/*", abi.WatchOptions{}) },
		"unwatch_pattern": func() error { return g.UnwatchPattern(ctx, "in/*") },
		"timer":           func() error { return g.Timer(ctx, "t", 0, abi.TimerOptions{}) },
		"cancel":          func() error { return g.Cancel(ctx, "t") },
	} {
		t.Run("closed "+name, func(t *testing.T) { refused(t, call, abi.StatusUnavailable, "was replaced or stopped") })
	}
}

// refused makes call, which the guard must refuse with status and a
// message containing msg, without calling the next link.
func refused(t *testing.T, call func() error, status abi.Status, msg string) {
	t.Helper()
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("the call reached the next link (%v)", p)
			}
		}()
		err = call()
	}()
	if got := abi.StatusOf(err); got != status || !strings.Contains(fmt.Sprint(err), msg) {
		t.Errorf("got %v (%v), want %v with %q", got, err, status, msg)
	}
}

// A call the guard allows reaches the next link as it was made.
func TestGuardPassesAllowedCalls(t *testing.T) {
	ctx := context.Background()
	var closed bool
	var denied []string
	store := abitest.New()
	g := guardOf(store, &closed, &denied)
	if _, err := g.Set(ctx, "both/a", []byte("v"), abi.SetOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	v, err := g.Get(ctx, "both/a")
	if err != nil || string(v.Data) != "v" {
		t.Fatalf("get after set: %q, %v", v.Data, err)
	}
	if _, err := g.Lock(ctx, "both/l", time.Second, abi.LockOptions{}); err != nil {
		t.Fatalf("lock on a key the rule may lock and write: %v", err)
	}
	if err := g.Watch(ctx, "in/a", abi.WatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(denied) != 0 {
		t.Errorf("told of denials %q for allowed calls", denied)
	}
}
