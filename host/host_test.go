package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/protocol"
)

func watchInit(keys ...string) func(context.Context, abi.Host) error {
	return func(ctx context.Context, h abi.Host) error {
		for _, k := range keys {
			if err := h.Watch(ctx, k, abi.WatchOptions{}); err != nil {
				return err
			}
		}
		return nil
	}
}

func TestRuleReactsToChange(t *testing.T) {
	e := newEnv(t)
	e.load("echo", goRule{
		init: watchInit("in"),
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if ev.Op != abi.OpSet || ev.Key != "in" || ev.Version == "" || ev.Resync {
				return fmt.Errorf("unexpected event %+v", ev)
			}
			_, err := h.Set(ctx, "out", append([]byte("got "), ev.Value...), abi.SetOptions{})
			return err
		},
	})
	e.set("in", "21")
	e.waitValue("out", "got 21")
	waitFor(t, "handled counted", func() bool { return e.status("echo").Handled == 1 })
	if s := e.status("echo"); s.Failed != 0 || len(s.Watches) != 1 {
		t.Fatalf("status %+v", s)
	}
}

// Two rules watching one key share one KEYNOTIFY; it is stopped when the last
// one goes, and nothing more is notified for it.
func TestOneRegistrationPerKey(t *testing.T) {
	e := newEnv(t)
	var a, b atomic.Int64
	count := func(n *atomic.Int64) goRule {
		return goRule{init: watchInit("shared"), handle: func(context.Context, abi.Host, abi.Event) error { n.Add(1); return nil }}
	}
	pa := e.load("a", count(&a))
	pb := e.load("b", count(&b))
	var sentinel atomic.Int64
	e.load("sentinel", goRule{init: watchInit("sentinel"), handle: func(context.Context, abi.Host, abi.Event) error { sentinel.Add(1); return nil }})
	if n := e.host.Stats().WatchedKeys; n != 2 {
		t.Fatalf("watched keys = %d, want 2 (shared, sentinel)", n)
	}
	e.set("shared", "1")
	waitFor(t, "both rules notified", func() bool { return a.Load() == 1 && b.Load() == 1 })
	if n := e.client.Stats().Notifications; n != 1 {
		t.Fatalf("client received %d notifications for one change, want 1", n)
	}
	if err := e.host.Remove(e.ctx(), pa); err != nil {
		t.Fatal(err)
	}
	e.set("shared", "2")
	waitFor(t, "remaining rule notified", func() bool { return b.Load() == 2 })
	if err := e.host.Remove(e.ctx(), pb); err != nil {
		t.Fatal(err)
	}
	if n := e.host.Stats().WatchedKeys; n != 1 {
		t.Fatalf("watched keys after removing both = %d, want 1", n)
	}
	before := e.client.Stats().Notifications
	e.set("shared", "3")   // not watched any more: the store must not notify
	e.set("sentinel", "x") // notifications on one connection arrive in order
	waitFor(t, "sentinel notified", func() bool { return sentinel.Load() == 1 })
	if n := e.client.Stats().Notifications - before; n != 1 {
		t.Fatalf("%d notifications after STOP, want only the sentinel's", n)
	}
}

// Events reach a rule one at a time and in order; a full mailbox
// conflates a key's changes into its last waiting event, and past its
// bound of keys drops and counts a change of another key; other rules run
// in parallel meanwhile.
func TestMailboxOrderOverflowAndParallelism(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"slow.gorule": {Mailbox: 4, MailboxKeys: 4, Timeout: 30 * time.Second}}
	})
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	var inHandler atomic.Int32
	e.load("slow", goRule{init: watchInit("seq", "more"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		if inHandler.Add(1) != 1 {
			t.Error("two events handled at once")
		}
		defer inHandler.Add(-1)
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s/%d", ev.Value, ev.Coalesced))
		first := len(seen) == 1
		mu.Unlock()
		if first {
			<-release
		}
		return nil
	}})
	var fast atomic.Int64
	e.load("fast", goRule{init: watchInit("other"), handle: func(context.Context, abi.Host, abi.Event) error { fast.Add(1); return nil }})

	e.set("seq", "0")
	waitFor(t, "slow rule blocked in its first event", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	for i := 1; i <= 10; i++ {
		e.set("seq", strconv.Itoa(i))
	}
	// The slow rule is stuck; the fast one still works.
	e.set("other", "x")
	waitFor(t, "fast rule handles while slow one is busy", func() bool { return fast.Load() == 1 })
	waitFor(t, "overflow coalesced", func() bool { return e.status("slow").Coalesced == 6 })
	e.set("more", "m") // a key with nothing waiting, past the bound of keys
	waitFor(t, "overflow dropped", func() bool { return e.status("slow").Dropped == 1 })
	close(release)
	waitFor(t, "queued events handled", func() bool { return e.status("slow").Handled == 5 })
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(seen, ","); got != "0/0,1/0,2/0,3/0,10/6" {
		t.Fatalf("handled %s, want 0/0,1/0,2/0,3/0,10/6 (value/coalesced: 4..10 conflated into the last waiting)", got)
	}
	if !strings.Contains(e.logs.String(), "rule mailbox full") {
		t.Fatal("overflow was not logged")
	}
}

// A rule is not woken by its own writes unless it watches with self.
func TestOwnWritesAreNotEchoed(t *testing.T) {
	e := newEnv(t)
	var quiet, self atomic.Int64
	e.load("quiet", goRule{init: watchInit("q"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		quiet.Add(1)
		if string(ev.Value) == "start" {
			if _, err := h.Set(ctx, "q", []byte("mine"), abi.SetOptions{}); err != nil {
				return err
			}
			if err := h.Del(ctx, "q", abi.DelOptions{}); err != nil {
				return err
			}
			_, err := h.Set(ctx, "q-done", []byte("1"), abi.SetOptions{})
			return err
		}
		return nil
	}})
	e.load("self", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "s", abi.WatchOptions{Self: true}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			self.Add(1)
			if string(ev.Value) == "start" {
				_, err := h.Set(ctx, "s", []byte("mine"), abi.SetOptions{})
				return err
			}
			return nil
		},
	})
	e.set("q", "start")
	e.waitValue("q-done", "1")
	e.set("q", "external") // delivered after the two echoes, which must be skipped
	waitFor(t, "external change handled", func() bool { return quiet.Load() >= 2 })
	e.set("s", "start")
	waitFor(t, "self rule sees its own write", func() bool { return self.Load() == 2 })
	if n := quiet.Load(); n != 2 {
		t.Fatalf("quiet rule handled %d events, want 2 (start, external)", n)
	}
	if s := e.status("quiet"); s.Echoes != 2 {
		t.Fatalf("quiet rule echoes = %d, want 2 (its set and its delete)", s.Echoes)
	}
}

// Two rules feeding each other forever are damped and logged with their names.
func TestFeedbackLoopDamped(t *testing.T) {
	e := newEnv(t, func(o *Config) { o.MaxHops = 6 })
	relay := func(from, to string) goRule {
		return goRule{init: watchInit(from), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			n, _ := strconv.Atoi(string(ev.Value))
			_, err := h.Set(ctx, to, []byte(strconv.Itoa(n+1)), abi.SetOptions{})
			return err
		}}
	}
	e.load("ping", relay("a", "b"))
	e.load("pong", relay("b", "a"))
	e.set("a", "0")
	waitFor(t, "loop damped", func() bool { return e.host.Stats().LoopsDamped == 1 })
	// The drop is counted just before it is logged: wait for the line (a
	// single read right after the count failed in a loaded CI run).
	waitFor(t, "the damping logged with the rule names", func() bool {
		logs := e.logs.String()
		return strings.Contains(logs, "feedback loop between rules damped") && strings.Contains(logs, "ping.gorule -> pong.gorule")
	})
	// Hops 0..6 are delivered, hop 7 is dropped: 7 events handled. (The
	// drop can be counted before the 7th handler returns, so wait for it.)
	total := func() uint64 { return e.status("ping").Handled + e.status("pong").Handled }
	waitFor(t, "7 events handled", func() bool { return total() == 7 })
	// A fresh external write starts a new chain, damped the same way.
	e.set("a", "100")
	waitFor(t, "second loop damped", func() bool { return e.host.Stats().LoopsDamped == 2 })
	waitFor(t, "14 events handled", func() bool { return total() == 14 })
}

// After a reconnect every watch is re-registered and keys changed while
// offline are delivered once as resync events.
func TestResyncAfterReconnect(t *testing.T) {
	b := newEnv(t) // broker and user client; the host under test goes through a proxy
	px := testnet.NewProxy(t, b.addr)
	e := newEnvAt(t, px.Addr())
	var mu sync.Mutex
	var got []abi.Event
	e.load("watcher", goRule{init: watchInit("changed", "same", "gone"), handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev)
		return nil
	}})
	b.set("same", "1")
	b.set("changed", "1")
	b.set("gone", "1")
	waitFor(t, "three live events", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 3 })

	px.Cut()
	waitFor(t, "disconnect noticed", func() bool {
		_, err := e.client.Get(context.Background(), []byte("x"), protocol.CallOptions{})
		return errors.Is(err, protocol.ErrNotConnected)
	})
	b.set("changed", "2")
	if _, err := b.user.Del(b.ctx(), []byte("gone"), protocol.DelOptions{}); err != nil {
		t.Fatal(err)
	}
	px.Heal()
	waitFor(t, "two resync events", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 5 })
	mu.Lock()
	resync := map[string]abi.Event{}
	for _, ev := range got[3:] {
		resync[ev.Key] = ev
	}
	mu.Unlock()
	if ev := resync["changed"]; ev.Op != abi.OpSet || string(ev.Value) != "2" || !ev.Resync || ev.Version == "" {
		t.Fatalf("changed: %+v", ev)
	}
	if ev := resync["gone"]; ev.Op != abi.OpDelete || !ev.Resync {
		t.Fatalf("gone: %+v", ev)
	}
	// Watches are live again: a new change arrives as a normal event.
	b.set("same", "2")
	waitFor(t, "live event after reconnect", func() bool { mu.Lock(); defer mu.Unlock(); return len(got) == 6 })
	mu.Lock()
	defer mu.Unlock()
	if ev := got[5]; ev.Key != "same" || ev.Resync || string(ev.Value) != "2" {
		t.Fatalf("after reconnect: %+v", ev)
	}
}

func TestPermissionDenialIsAStatus(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"limited.gorule": {Read: []string{"sensors/**"}, Write: []string{"hvac/*"}, Watch: []string{"trigger"}, Lock: []string{}}}
	})
	var mu sync.Mutex
	results := map[string]abi.Status{}
	record := func(name string, err error) {
		mu.Lock()
		defer mu.Unlock()
		results[name] = abi.StatusOf(err)
	}
	e.load("limited", goRule{
		init: func(ctx context.Context, h abi.Host) error {
			record("watch other", h.Watch(ctx, "other", abi.WatchOptions{}))
			return h.Watch(ctx, "trigger", abi.WatchOptions{})
		},
		handle: func(ctx context.Context, h abi.Host, _ abi.Event) error {
			_, err := h.Get(ctx, "secrets/key")
			record("get secrets", err)
			_, err = h.Get(ctx, "sensors/a/temp")
			record("get sensor", err)
			_, err = h.Set(ctx, "hvac/a/b", []byte("x"), abi.SetOptions{})
			record("set deep", err)
			_, err = h.Lock(ctx, "any", time.Second, abi.LockOptions{})
			record("lock", err)
			_, err = h.Set(ctx, "hvac/target", []byte("x"), abi.SetOptions{})
			record("set allowed", err)
			return nil
		},
	})
	e.set("trigger", "go")
	e.waitValue("hvac/target", "x")
	want := map[string]abi.Status{
		"watch other": abi.StatusDenied, "get secrets": abi.StatusDenied, "get sensor": abi.StatusNotFound,
		"set deep": abi.StatusDenied, "lock": abi.StatusDenied, "set allowed": abi.StatusOK,
	}
	mu.Lock()
	defer mu.Unlock()
	for k, w := range want {
		if results[k] != w {
			t.Errorf("%s: status %v, want %v", k, results[k], w)
		}
	}
}

func TestValueSizeLimit(t *testing.T) {
	e := newEnv(t, func(o *Config) { o.Defaults.MaxValueBytes = 8 })
	errc := make(chan error, 1)
	e.load("big", goRule{init: watchInit("go"), handle: func(ctx context.Context, h abi.Host, _ abi.Event) error {
		_, err := h.Set(ctx, "v", []byte("123456789"), abi.SetOptions{})
		errc <- err
		return nil
	}})
	e.set("go", "1")
	if err := <-errc; abi.StatusOf(err) != abi.StatusTooLarge {
		t.Fatalf("9-byte value under an 8-byte limit: %v", err)
	}
	if _, ok := e.get("v"); ok {
		t.Fatal("oversized value was stored")
	}
}

// A failing rule is reported and isolated; after repeated failures it is
// disabled until its file changes; other rules keep working.
func TestFailingRuleIsolatedAndDisabled(t *testing.T) {
	e := newEnv(t)
	e.load("bad", goRule{init: watchInit("k"), handle: func(context.Context, abi.Host, abi.Event) error {
		return fmt.Errorf("%w: boom", abi.ErrCrashed)
	}})
	var good atomic.Int64
	e.load("good", goRule{init: watchInit("k"), handle: func(context.Context, abi.Host, abi.Event) error { good.Add(1); return nil }})
	for i := 0; i < maxConsecutiveFailures+3; i++ {
		e.set("k", strconv.Itoa(i))
	}
	waitFor(t, "good rule handled all", func() bool { return good.Load() == int64(maxConsecutiveFailures+3) })
	waitFor(t, "bad rule disabled", func() bool { s := e.status("bad"); return s.Disabled && s.Dropped == 3 })
	if s := e.status("bad"); s.Failed != maxConsecutiveFailures {
		t.Fatalf("bad rule: %+v", s)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "rule failed") || !strings.Contains(logs, "kind=crash") || !strings.Contains(logs, "rule disabled") {
		t.Fatalf("failure not reported:\n%s", logs)
	}
}

// A file that does not compile leaves the running version in place; a good
// new version swaps in; removing the file stops the rule and its watches.
func TestReloadAndRemove(t *testing.T) {
	e := newEnv(t)
	tag := func(v string) goRule {
		return goRule{init: watchInit("k"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			_, err := h.Set(ctx, "out", []byte(v+":"+string(ev.Value)), abi.SetOptions{})
			return err
		}}
	}
	p := e.load("v1", tag("v1"))
	e.set("k", "a")
	e.waitValue("out", "v1:a")

	e.write(p, "no-such-rule")
	err := e.host.Load(e.ctx(), p)
	var ce *abi.CompileError
	if !errors.As(err, &ce) || ce.Line != 1 || !strings.Contains(err.Error(), "v1.gorule:1:") {
		t.Fatalf("broken reload: %v", err)
	}
	e.set("k", "b")
	e.waitValue("out", "v1:b")

	e.rt.register("v2", tag("v2"))
	e.reload(p, "v2")
	e.set("k", "c")
	e.waitValue("out", "v2:c")

	if err := e.host.Remove(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	if n := e.host.Stats().WatchedKeys; n != 0 {
		t.Fatalf("watched keys after remove = %d", n)
	}
	if len(e.host.Status()) != 0 {
		t.Fatal("rule still listed after remove")
	}
}

// Hot reload in the middle of a stream: every event is handled exactly once,
// by the old or the new version, never both, never neither.
func TestHotReloadStreamExactlyOnce(t *testing.T) {
	e := newEnv(t)
	const n = 1000
	var mu sync.Mutex
	handled := map[string][]string{}
	tag := func(v string) goRule {
		return goRule{init: watchInit("stream"), handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
			mu.Lock()
			defer mu.Unlock()
			handled[string(ev.Value)] = append(handled[string(ev.Value)], v)
			return nil
		}}
	}
	p := e.load("r", tag("old"))
	e.rt.register("new", tag("new"))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			if _, err := e.user.Set(context.Background(), []byte("stream"), []byte(strconv.Itoa(i)), protocol.SetOptions{}); err != nil {
				t.Errorf("set %d: %v", i, err)
				return
			}
		}
	}()
	waitFor(t, "stream under way", func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) > n/4 })
	e.reload(p, "new")
	wg.Wait()
	waitFor(t, "all events handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(handled) == n })
	mu.Lock()
	defer mu.Unlock()
	var olds, news int
	for i := 0; i < n; i++ {
		h := handled[strconv.Itoa(i)]
		if len(h) != 1 {
			t.Fatalf("event %d handled %d times (%v)", i, len(h), h)
		}
		if h[0] == "old" {
			olds++
		} else {
			news++
		}
	}
	if olds == 0 || news == 0 {
		t.Fatalf("reload did not happen mid-stream: old %d, new %d", olds, news)
	}
	if s := e.status("r"); s.Dropped != 0 {
		t.Fatalf("dropped %d", s.Dropped)
	}
}

func TestWatchDirLoadsReloadsAndRemoves(t *testing.T) {
	e := newEnv(t)
	e.rt.register("w1", goRule{init: watchInit("k"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(ctx, "out", []byte("w1"), abi.SetOptions{})
		return err
	}})
	e.rt.register("w2", goRule{init: watchInit("k"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(ctx, "out", []byte("w2"), abi.SetOptions{})
		return err
	}})
	p := filepath.Join(e.dir, "w.gorule")
	e.write(p, "w1")
	if err := os.WriteFile(filepath.Join(e.dir, "README.md"), []byte("not a rule"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- e.host.WatchDir(ctx, e.dir, ready) }()
	defer func() { cancel(); <-done }()
	<-ready
	if n := len(e.host.Status()); n != 1 {
		t.Fatalf("%d rules loaded, want 1", n)
	}
	e.set("k", "1")
	e.waitValue("out", "w1")
	e.write(p, "w2")
	waitFor(t, "reload", func() bool {
		e.set("k", strconv.FormatInt(time.Now().UnixNano(), 10))
		v, _ := e.get("out")
		return v == "w2"
	})
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "rule removed", func() bool { return len(e.host.Status()) == 0 })
}
