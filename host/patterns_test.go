package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/store"
)

// patternRule watches pattern at load (opts) and logs every event it gets
// into j as "OP key=value[ resync]".
func patternRule(j *handled, pattern string, opts abi.WatchOptions) goRule {
	return goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.WatchPattern(ctx, pattern, opts) },
		handle: func(_ context.Context, _ abi.Host, ev abi.Event) error {
			j.add("%s", showEvent(ev))
			return nil
		},
	}
}

func showEvent(ev abi.Event) string {
	s := fmt.Sprintf("%s %s", ev.Op, ev.Key)
	if ev.Op == abi.OpSet {
		s += "=" + string(ev.Value)
	}
	if ev.Resync {
		s += " resync"
	}
	return s
}

// advance moves the serial env's virtual clock by d, running every clock
// call due on the way, the host idle after each.
func advance(e *env, vc *clock.Virtual, d time.Duration) {
	end := vc.Now().Add(d)
	for {
		at, ok := vc.Next()
		if !ok || at.After(end) {
			break
		}
		vc.Set(at)
		for vc.Fire() {
			e.idle()
		}
	}
	vc.Set(end)
	e.idle()
}

func wantHandled(t *testing.T, j *handled, step string, want ...string) {
	t.Helper()
	if got := j.take(); !slices.Equal(got, want) {
		t.Fatalf("%s: got %q\nwant %q", step, got, want)
	}
}

// A pattern watch gives the rule the keys that exist when it loads (in key
// order, as resyncs), their changes and deletions, and the keys created
// later once the rescan finds them, on the host's clock; never the host's
// own keys nor keys of other patterns.
func TestPatternWatchDeliversExistingChangedAndLaterKeys(t *testing.T) {
	e, vc := newSerialEnv(t)
	e.set("a/2", "two")
	e.set("a/1", "one")
	e.set("b/1", "other")
	e.set(ReservedPrefix+"a/9", "host's") // matches no pattern a rule may watch
	var j handled
	e.load("r", patternRule(&j, "a/*", abi.WatchOptions{}))
	e.idle()
	wantHandled(t, &j, "at load", "SET a/1=one resync", "SET a/2=two resync")

	e.set("a/1", "uno")
	e.del("a/2")
	e.set("b/1", "ignored")
	e.idle()
	wantHandled(t, &j, "changes", "SET a/1=uno", "DELETE a/2")

	e.set("a/3", "three") // not registered yet: found by the rescan
	e.idle()
	wantHandled(t, &j, "before the rescan")
	advance(e, vc, DefaultRescan-time.Millisecond)
	wantHandled(t, &j, "just before the rescan")
	advance(e, vc, time.Millisecond)
	wantHandled(t, &j, "at the rescan", "SET a/3=three resync")
	e.set("a/3", "tres")
	e.idle()
	wantHandled(t, &j, "a found key's change", "SET a/3=tres")

	s := e.status("r")
	if !slices.Equal(s.Patterns, []string{"a/*"}) || s.PatternKeys != 2 { // a/2 pruned by the rescan
		t.Errorf("status: patterns %q covering %d keys, want a/* covering 2 (a/1, a/3)", s.Patterns, s.PatternKeys)
	}
	if ps := e.host.Stats().Patterns; ps.Patterns != 1 || ps.FoundLate != 1 || ps.Scans < 3 || ps.Pages < ps.Scans {
		t.Errorf("stats %+v: want 1 pattern, 1 key found late, a scan at the call, the first and the rescan", ps)
	}
}

// A key a rule of the host writes reaches the rules whose patterns match it
// at once, without a rescan; the writer itself only with self. Two rules
// watching one pattern share its scans.
func TestPatternKeyWrittenByARuleFoundAtOnce(t *testing.T) {
	e, vc := newSerialEnv(t)
	var a, b, w handled
	e.load("a", patternRule(&a, "dev/*", abi.WatchOptions{}))
	e.load("b", patternRule(&b, "dev/*", abi.WatchOptions{Self: true}))
	e.load("w", goRule{
		init: func(ctx context.Context, h abi.Host) error {
			if err := h.WatchPattern(ctx, "dev/*", abi.WatchOptions{}); err != nil {
				return err
			}
			return h.Watch(ctx, "make", abi.WatchOptions{})
		},
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			w.add("%s", showEvent(ev))
			if ev.Key == "make" {
				_, err := h.Set(ctx, "dev/"+string(ev.Value), []byte("new"), abi.SetOptions{})
				return err
			}
			return nil
		},
	})
	e.idle()
	scans := e.host.Stats().Patterns.Scans
	e.set("make", "7")
	e.idle()
	wantHandled(t, &a, "rule a", "SET dev/7=new resync")
	wantHandled(t, &b, "rule b", "SET dev/7=new resync")
	wantHandled(t, &w, "the writer", "SET make=7") // its own write is no event for it
	if n := e.host.Stats().Patterns.Scans; n != scans {
		t.Errorf("%d scans to find a rule's write, want none", n-scans)
	}
	e.set("dev/7", "changed")
	e.idle()
	wantHandled(t, &w, "the writer, for an outside change", "SET dev/7=changed")
	wantHandled(t, &a, "rule a, for an outside change", "SET dev/7=changed")
	advance(e, vc, DefaultRescan)
	if n := e.host.Stats().Patterns.Scans - scans; n != 1 {
		t.Errorf("one rescan of dev/* for three rules took %d scans, want 1", n)
	}
	wantHandled(t, &a, "nothing new at the rescan")
}

// max_watched_keys bounds a rule's pattern keys: a pattern matching more
// fails with LIMIT at the call, and keys found later past it are not
// watched, counted and reported in the rule's status; other rules go on.
func TestPatternWatchBoundedByMaxWatchedKeys(t *testing.T) {
	e, vc := newSerialEnv(t)
	e.host.defaults.MaxWatchedKeys = 2
	for _, k := range []string{"a/1", "a/2", "a/3"} {
		e.set(k, "v")
	}
	var j, other handled
	e.rt.register("big", patternRule(&j, "a/*", abi.WatchOptions{}))
	err := e.host.Load(e.ctx(), e.writeRuleFile("big"))
	if abi.StatusOf(err) != abi.StatusLimit || !strings.Contains(err.Error(), "more than max_watched_keys (2) keys match") {
		t.Fatalf("load of a rule watching 3 keys with a bound of 2: %v, want LIMIT naming max_watched_keys", err)
	}
	e.load("small", patternRule(&j, "a/[12]", abi.WatchOptions{}))
	e.load("other", patternRule(&other, "a/3", abi.WatchOptions{}))
	e.idle()
	wantHandled(t, &j, "small", "SET a/1=v resync", "SET a/2=v resync")
	wantHandled(t, &other, "other", "SET a/3=v resync")

	if err := e.host.Remove(e.ctx(), e.writeRuleFile("small")); err != nil {
		t.Fatal(err)
	}
	e.load("grows", goRule{
		init: func(ctx context.Context, h abi.Host) error {
			if err := h.WatchPattern(ctx, "a/[12]", abi.WatchOptions{}); err != nil {
				return err
			}
			return h.WatchPattern(ctx, "a/[3]", abi.WatchOptions{}) // 3 keys in all
		},
		handle: func(_ context.Context, _ abi.Host, ev abi.Event) error { j.add("%s", showEvent(ev)); return nil },
	})
	e.idle()
	got := j.take()
	if len(got) != 2 {
		t.Fatalf("a rule whose two patterns cover 3 keys with a bound of 2 got %q, want 2 keys", got)
	}
	advance(e, vc, DefaultRescan)
	if s := e.status("grows"); s.PatternKeys != 2 || !strings.Contains(s.LastError, "max_watched_keys (2)") {
		t.Errorf("status: %d keys, last error %q; want 2 and the bound named", s.PatternKeys, s.LastError)
	}
	if n := e.host.Stats().Patterns.OverLimit; n == 0 {
		t.Error("keys past max_watched_keys not counted")
	}
	e.set("a/3", "w")
	e.idle()
	wantHandled(t, &other, "the other rule goes on", "SET a/3=w")
}

// Bad patterns are refused with a clear error and the status naming what is
// wrong; keys() is bounded by its limit (LIMIT, never a cut list) and lists
// only keys the rule may read, never the host's.
func TestPatternHostileInputAndPermissions(t *testing.T) {
	e, _ := newSerialEnv(t)
	e.host.rules = map[string]RuleConfig{"r.gorule": {Read: []string{"a/**", "b/1"}}}
	for i := range 30 {
		e.set(fmt.Sprintf("a/%02d", i), "v")
	}
	e.set("b/1", "v")
	e.set("b/2", "secret")
	var h abi.Host
	e.load("r", goRule{init: func(_ context.Context, hh abi.Host) error { h = hh; return nil }})
	ctx := e.ctx()
	for _, tc := range []struct {
		pattern string
		status  abi.Status
		msg     string
	}{
		{"[", abi.StatusInvalid, "unterminated ["},
		{`\`, abi.StatusInvalid, "escaping backslash"},
		{strings.Repeat("*?", 1<<15) + "x", abi.StatusInvalid, "more than 65536"},
		{"", abi.StatusInvalid, "empty"},
		{"secret/*", abi.StatusDenied, "no key it matches can be read"},
		{ReservedPrefix + "*", abi.StatusDenied, "reserved for the host"},
	} {
		for verb, call := range map[string]func() error{
			"keys":          func() error { _, err := h.Keys(ctx, tc.pattern, abi.KeysOptions{}); return err },
			"watch_pattern": func() error { return h.WatchPattern(ctx, tc.pattern, abi.WatchOptions{}) },
		} {
			err := call()
			if abi.StatusOf(err) != tc.status || !strings.Contains(err.Error(), tc.msg) || !strings.HasPrefix(err.Error(), verb) {
				t.Errorf("%s(%.20q) = %v, want %s saying %q", verb, tc.pattern, err, tc.status, tc.msg)
			}
		}
	}
	keys, err := h.Keys(ctx, "*", abi.KeysOptions{})
	if err != nil || len(keys) != 31 || keys[0] != "a/00" || keys[30] != "b/1" {
		t.Errorf("keys(*) = %d keys (%v), want the 31 the rule may read, in order", len(keys), err)
	}
	if _, err := h.Keys(ctx, "a/*", abi.KeysOptions{Limit: 29}); abi.StatusOf(err) != abi.StatusLimit || !strings.Contains(err.Error(), "more than 29 keys match") {
		t.Errorf("keys past the limit: %v, want LIMIT", err)
	}
	for _, limit := range []int{-1, abi.MaxKeysLimit + 1} {
		if _, err := h.Keys(ctx, "a/*", abi.KeysOptions{Limit: limit}); abi.StatusOf(err) != abi.StatusInvalid {
			t.Errorf("keys with limit %d: %v, want INVALID", limit, err)
		}
	}
	if err := h.UnwatchPattern(ctx, "a/*"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("unwatch_pattern of a pattern not watched: %v, want NOT_FOUND", err)
	}
}

// A pattern a rule may read only part of delivers only that part.
func TestPatternWatchDeliversOnlyReadableKeys(t *testing.T) {
	e, _ := newSerialEnv(t)
	e.host.rules = map[string]RuleConfig{"r.gorule": {Read: []string{"t/*/setPoint"}}}
	e.set("t/1/setPoint", "20")
	e.set("t/1/secret", "x")
	var j handled
	e.load("r", patternRule(&j, "t/*", abi.WatchOptions{}))
	e.idle()
	e.set("t/1/secret", "y")
	e.set("t/2/setPoint", "21") // found at the rescan, if readable
	e.idle()
	wantHandled(t, &j, "readable keys only", "SET t/1/setPoint=20 resync")
}

// A reload that keeps a pattern gives the rule nothing it saw again, and
// the keys created meanwhile; one that drops it releases its keys.
func TestPatternWatchAcrossReload(t *testing.T) {
	e, _ := newSerialEnv(t)
	e.set("a/1", "v")
	var j handled
	p := e.loadVersion("r", "1", patternRule(&j, "a/*", abi.WatchOptions{}))
	e.idle()
	wantHandled(t, &j, "first version", "SET a/1=v resync")
	e.set("a/2", "v")
	e.idle()
	e.loadVersion("r", "2", patternRule(&j, "a/*", abi.WatchOptions{}))
	e.idle()
	wantHandled(t, &j, "second version", "SET a/2=v resync")
	e.loadVersion("r", "3", goRule{handle: func(_ context.Context, _ abi.Host, ev abi.Event) error { j.add("%s", showEvent(ev)); return nil }})
	e.idle()
	e.set("a/1", "w")
	e.idle()
	wantHandled(t, &j, "a version without the pattern")
	if s := e.status("r"); len(s.Patterns) != 0 || s.PatternKeys != 0 {
		t.Errorf("status after the pattern was dropped: %+v", s)
	}
	if n := e.host.Stats().WatchedKeys; n != 0 {
		t.Errorf("%d keys still registered", n)
	}
	_ = p
}

// writeRuleFile writes name.gorule, the rule registered as name, and
// returns its path.
func (e *env) writeRuleFile(name string) string {
	e.t.Helper()
	p := filepath.Join(e.dir, name+".gorule")
	if err := os.WriteFile(p, []byte(name), 0o644); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// hugeStoreKeys is the size of the store of TestPatternHugeStore: 1M keys
// (200,000 with -short).
func hugeStoreKeys() int {
	if testing.Short() {
		return 200_000
	}
	return 1_000_000
}

// On a store of 1M keys, keys("*") and a pattern matching them all fail
// with LIMIT after reading only the pages their bound needs (so the host
// holds at most the bound and a page), and another rule's pattern watch
// goes on.
func TestPatternHugeStore(t *testing.T) {
	n := hugeStoreKeys()
	e, _ := newSerialEnv(t, func(st *store.Store) {
		v := hlc.HLC{Wall: t0, Node: "seed"}
		for i := range n {
			v.Counter++
			if err := st.Seed(fmt.Appendf(nil, "k/%07d", i), []byte("v"), v); err != nil {
				t.Fatal(err)
			}
		}
	})
	e.set("x/1", "v")
	var h abi.Host
	var j handled
	e.load("small", patternRule(&j, "x/*", abi.WatchOptions{}))
	e.load("r", goRule{init: func(_ context.Context, hh abi.Host) error { h = hh; return nil }})
	e.idle()
	wantHandled(t, &j, "the small pattern", "SET x/1=v resync")
	pages := func() uint64 { return e.host.Stats().Patterns.Pages }

	before := pages()
	if _, err := h.Keys(e.ctx(), "*", abi.KeysOptions{}); abi.StatusOf(err) != abi.StatusLimit {
		t.Fatalf("keys(*) on %d keys: %v, want LIMIT", n, err)
	}
	if read := pages() - before; read > 3 {
		t.Errorf("keys(*) with the default limit of %d read %d pages", abi.DefaultKeysLimit, read)
	}
	before = pages()
	err := h.WatchPattern(e.ctx(), "k/*", abi.WatchOptions{})
	if abi.StatusOf(err) != abi.StatusLimit || !strings.Contains(err.Error(), "max_watched_keys (10000)") {
		t.Fatalf("watch_pattern over %d keys: %v, want LIMIT naming max_watched_keys", n, err)
	}
	if read := pages() - before; read > DefaultMaxWatchedKeys/1000+3 {
		t.Errorf("a pattern over %d keys read %d pages before LIMIT", n, read)
	}
	if s := e.status("r"); len(s.Patterns) != 0 || s.PatternKeys != 0 {
		t.Errorf("a refused pattern watch left %+v", s)
	}
	e.set("x/1", "w")
	e.idle()
	wantHandled(t, &j, "the other rule goes on", "SET x/1=w")
}

// After an outage the rule gets what changed while the host was offline:
// its pattern keys changed or deleted (the watch registry's resync) and the
// keys created meanwhile (a scan at once, not at the next rescan).
func TestPatternWatchAfterReconnect(t *testing.T) {
	b := newEnv(t) // broker and user client; the host under test goes through a proxy
	px := testnet.NewProxy(t, b.addr)
	e := newEnvAt(t, px.Addr(), func(o *Config) { o.Defaults.Rescan = RescanOff })
	b.set("k/1", "1")
	b.set("k/2", "1")
	var j handled
	e.load("r", patternRule(&j, "k/*", abi.WatchOptions{}))
	waitFor(t, "the two keys at load", func() bool { return len(j.snapshot()) == 2 })
	wantHandled(t, &j, "at load", "SET k/1=1 resync", "SET k/2=1 resync")

	px.Cut()
	waitFor(t, "disconnect noticed", func() bool {
		_, err := e.client.Get(context.Background(), []byte("x"), protocol.CallOptions{})
		return errors.Is(err, protocol.ErrNotConnected)
	})
	b.set("k/1", "2")
	b.del("k/2")
	b.set("k/3", "1")
	px.Heal()
	waitFor(t, "three resync events", func() bool { return len(j.snapshot()) == 3 })
	wantHandled(t, &j, "after the outage", "SET k/1=2 resync", "DELETE k/2 resync", "SET k/3=1 resync")
	b.set("k/3", "2")
	waitFor(t, "a live event for the key found", func() bool { return len(j.snapshot()) == 1 })
	wantHandled(t, &j, "live again", "SET k/3=2")
}

// snapshot returns what was handled so far, leaving it.
func (j *handled) snapshot() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.lines)
}

// In a dry run a pattern watch delivers as in a real run and the rule's
// writes are staged, not sent: nothing reaches the store, and a key it
// writes is no key a pattern finds.
func TestPatternWatchInDryRun(t *testing.T) {
	var staged stagedLog
	e := newEnv(t, func(o *Config) { o.DryRun = staged.add })
	e.set("t/1", "20")
	var j handled
	e.load("r", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.WatchPattern(ctx, "t/*", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			j.add("%s", showEvent(ev))
			_, err := h.Set(ctx, "t/copy-"+ev.Key[2:], ev.Value, abi.SetOptions{})
			return err
		},
	})
	waitFor(t, "the key at load", func() bool { return len(j.snapshot()) == 1 })
	e.set("t/1", "21")
	waitFor(t, "its change", func() bool { return len(j.snapshot()) == 2 })
	wantHandled(t, &j, "dry run", "SET t/1=20 resync", "SET t/1=21")
	if _, found := e.get("t/copy-1"); found {
		t.Error("a dry run's write reached the store")
	}
	if got := staged.lines(); len(got) != 2 || !strings.Contains(got[0], "t/copy-1") {
		t.Errorf("staged %q, want the two copies", got)
	}
}

// A rule shared by a group and taken over by another host gets, from its
// patterns, only what differs from what its previous owner handled: a key
// changed, a key created and a key deleted while no host ran it, not the
// key it saw.
func TestPatternWatchTakenOverInGroup(t *testing.T) {
	c := newCluster(t, 1, groupTestTTL)
	var j [2]handled
	c.custom = map[string]func(int) goRule{"r00": func(i int) goRule { return patternRule(&j[i], "g/*", abi.WatchOptions{}) }}
	ctx := context.Background()
	for k, v := range map[string]string{"g/1": "a", "g/2": "b", "g/4": "d"} {
		if _, err := c.user.Set(ctx, []byte(k), []byte(v), protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	m0 := c.start()
	waitFor(t, "host 0 gets the three keys", func() bool { return len(j[0].snapshot()) == 3 })
	if _, err := c.user.Set(ctx, []byte("g/1"), []byte("a2"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "host 0 handles the change", func() bool { return len(j[0].snapshot()) == 4 })
	wantHandled(t, &j[0], "host 0", "SET g/1=a resync", "SET g/2=b resync", "SET g/4=d resync", "SET g/1=a2")
	if err := m0.host.Close(ctx); err != nil { // hands the rule over, its progress written
		t.Fatal(err)
	}
	for k, v := range map[string]string{"g/2": "b2", "g/3": "c"} {
		if _, err := c.user.Set(ctx, []byte(k), []byte(v), protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.user.Del(ctx, []byte("g/4"), protocol.DelOptions{}); err != nil {
		t.Fatal(err)
	}
	c.start()
	waitFor(t, "host 1 gets what changed", func() bool { return len(j[1].snapshot()) >= 3 })
	wantHandled(t, &j[1], "host 1", "SET g/2=b2 resync", "SET g/3=c resync", "DELETE g/4 resync")
}

// New rule settings apply to a rule's pattern watches while it runs: its
// rescan, and the keys its new permissions no longer allow are let go.
func TestPatternWatchFollowsRuleSettings(t *testing.T) {
	e, vc := newSerialEnv(t)
	e.set("a/1", "v")
	e.set("a/2", "v")
	var j handled
	e.load("r", patternRule(&j, "a/*", abi.WatchOptions{}))
	e.idle()
	wantHandled(t, &j, "at load", "SET a/1=v resync", "SET a/2=v resync")
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{Rescan: time.Second}, map[string]RuleConfig{"r.gorule": {Read: []string{"a/1", "a/3"}}}); err != nil {
		t.Fatal(err)
	}
	e.set("a/2", "w") // no longer readable: not delivered
	e.set("a/3", "v")
	e.idle()
	wantHandled(t, &j, "after the new settings")
	advance(e, vc, time.Second) // the new rescan, not the default 10 s
	wantHandled(t, &j, "at the new rescan", "SET a/3=v resync")
	if s := e.status("r"); s.PatternKeys != 2 {
		t.Errorf("%d pattern keys, want 2 (a/1, a/3)", s.PatternKeys)
	}
}

// In a dry run keys() lists the store as the rule's staged writes left it,
// as the real store would after those writes: a key it created is listed,
// a key it deleted is not, while the store itself has neither change.
func TestKeysInDryRunSeeStagedWrites(t *testing.T) {
	var staged stagedLog
	e := newEnv(t, func(o *Config) { o.DryRun = staged.add })
	e.set("t/1", "1")
	e.set("t/2", "2")
	listed := make(chan []string, 1)
	e.load("r", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "go", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if _, err := h.Set(ctx, "t/new", []byte("n"), abi.SetOptions{}); err != nil {
				return err
			}
			if err := h.Del(ctx, "t/1", abi.DelOptions{}); err != nil {
				return err
			}
			keys, err := h.Keys(ctx, "t/*", abi.KeysOptions{})
			if err != nil {
				return err
			}
			if _, err := h.Keys(ctx, "t/*", abi.KeysOptions{Limit: 1}); abi.StatusOf(err) != abi.StatusLimit {
				return fmt.Errorf("keys with limit 1 over 2 keys: %v, want LIMIT", err)
			}
			listed <- keys
			return nil
		},
	})
	e.set("go", "1")
	select {
	case keys := <-listed:
		if !slices.Equal(keys, []string{"t/2", "t/new"}) {
			t.Errorf("keys in the dry run: %q, want t/2 and t/new (t/1 deleted, t/new created, both staged)", keys)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the rule did not list its keys; status %+v", e.status("r"))
	}
	if _, found := e.get("t/new"); found {
		t.Error("a dry run's write reached the store")
	}
	if _, found := e.get("t/1"); !found {
		t.Error("a dry run's delete reached the store")
	}
}

// hookStore is the host's store with hooks on the calls of one key: run
// before its KEYNOTIFY is sent, and before its GET is.
type hookStore struct {
	*protocol.Client
	key          string
	onKeyNotify  atomic.Pointer[func()]
	onGet        atomic.Pointer[func()]
	gets, notify atomic.Int32
	failNotify   atomic.Int32 // KEYNOTIFYs of key to fail, as a store that timed out
}

func (s *hookStore) KeyNotify(ctx context.Context, key []byte, opts protocol.CallOptions) error {
	if string(key) == s.key {
		s.notify.Add(1)
		if f := s.onKeyNotify.Load(); f != nil {
			(*f)()
		}
		if s.failNotify.Add(-1) >= 0 {
			return fmt.Errorf("keynotify %s: %w", key, protocol.ErrTimeout)
		}
	}
	return s.Client.KeyNotify(ctx, key, opts)
}

func (s *hookStore) Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error) {
	if string(key) == s.key {
		s.gets.Add(1)
		if f := s.onGet.Load(); f != nil {
			(*f)()
		}
	}
	return s.Client.Get(ctx, key, opts)
}

// A key a rule of the host writes reaches a rule whose pattern matches it
// once the key is registered, from what the writer stored: before any read
// of the key (one round trip after the write, not two). The read that
// follows still finds a write another client made between the rule's write
// and the registration, which no notification reports, and the rule gets
// that too: nothing is missed for the round trip saved.
func TestPatternKeyWrittenByARuleNeedsNoReadFirst(t *testing.T) {
	hs := &hookStore{key: "dev/7"}
	e := newEnv(t, func(o *Config) {
		hs.Client = o.Store.(*protocol.Client)
		o.Store = hs
	})
	var a handled
	e.load("a", patternRule(&a, "dev/*", abi.WatchOptions{}))
	e.load("w", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "make", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			_, err := h.Set(ctx, "dev/"+string(ev.Value), []byte("new"), abi.SetOptions{})
			return err
		},
	})
	// Between the rule's write and the key's registration, another client
	// writes the key: the store sends the host no notification of it.
	outside := func() { // on the host's goroutine: no t.Fatal
		if _, err := e.user.Set(context.Background(), []byte("dev/7"), []byte("outside"), protocol.SetOptions{}); err != nil {
			t.Errorf("the outside write: %v", err)
		}
	}
	hs.onKeyNotify.Store(&outside)
	// The host's read of the key waits until rule a has the rule's write:
	// had the host read the key before giving it, this would time out.
	var givenBeforeRead atomic.Bool
	waitGiven := func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if len(a.snapshot()) > 0 {
				givenBeforeRead.Store(true)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	hs.onGet.Store(&waitGiven)
	e.set("make", "7")
	waitFor(t, "the rule's write, then the outside write", func() bool { return len(a.snapshot()) == 2 })
	wantHandled(t, &a, "rule a", "SET dev/7=new resync", "SET dev/7=outside resync")
	if !givenBeforeRead.Load() {
		t.Error("rule a got the key only after the host read it: two round trips after the write, want one")
	}
	if n, g := hs.notify.Load(), hs.gets.Load(); n != 1 || g != 1 {
		t.Errorf("%d KEYNOTIFY and %d GET of dev/7, want 1 and 1 (the read after the key was given)", n, g)
	}
	e.set("dev/7", "later")
	waitFor(t, "a later change", func() bool { return len(a.snapshot()) == 1 })
	wantHandled(t, &a, "a later change", "SET dev/7=later")
}

// In a group, a key a rule of one member writes reaches a pattern watch of
// a rule another member runs at once, through that member's doorbell, not
// at its next rescan (there is none here); the doorbell takes no reserved
// key and no key outside the member's patterns, and a member's published
// patterns that do not compile are left out.
func TestPatternKeyWrittenOnAnotherMemberFoundAtOnce(t *testing.T) {
	c := newCluster(t, 0, groupTestTTL)
	c.rulesCfg = map[string]RuleConfig{"p.gorule": {Rescan: RescanOff}}
	var p handled
	c.custom = map[string]func(int) goRule{
		"p": func(int) goRule { return patternRule(&p, "dev/*", abi.WatchOptions{}) },
		"w": func(int) goRule {
			return goRule{
				init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "make", abi.WatchOptions{}) },
				handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
					if n, del := strings.CutPrefix(string(ev.Value), "-"); del { // "-7" deletes dev/7
						return h.Del(ctx, "dev/"+n, abi.DelOptions{})
					}
					_, err := h.Set(ctx, "dev/"+string(ev.Value), []byte("new"), abi.SetOptions{})
					return err
				},
			}
		},
	}
	c.files = func(i int) map[string]string {
		if i == 0 {
			return map[string]string{"w.gorule": "w"}
		}
		return map[string]string{"p.gorule": "p"}
	}
	m0, m1 := c.start(), c.start()
	id1 := m1.client.ClientID()
	waitFor(t, "host 0 knows host 1's pattern", func() bool {
		return len(m0.host.group.Hints().PatternsOf(id1)) == 1
	})
	// A step learns the others' patterns before it takes its rules: wait
	// for host 0's rule to watch its key too.
	waitFor(t, "host 0's rule watching make", func() bool {
		s := m0.host.Status()
		return len(s) == 1 && s[0].State == StateRunning && slices.Equal(s[0].Watches, []string{"make"})
	})
	scans := m1.host.Stats().Patterns.Scans
	ctx := context.Background()
	bell := m1.host.group.Hints().DoorbellKey(id1)
	for _, hostile := range []string{ReservedPrefix + "group/g/roster", "other/1"} {
		if _, err := c.user.Set(ctx, []byte(bell), []byte(hostile), protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.user.Set(ctx, []byte("make"), []byte("7"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "host 1's rule gets the key host 0's rule wrote", func() bool { return len(p.snapshot()) == 1 })
	wantHandled(t, &p, "host 1's rule", "SET dev/7=new resync")
	if n := m1.host.Stats().Patterns.Scans; n != scans {
		t.Errorf("host 1 scanned %d times to find the key, want none", n-scans)
	}
	if _, err := c.user.Set(ctx, []byte("make"), []byte("7"), protocol.SetOptions{}); err != nil { // host 0's rule writes it again
		t.Fatal(err)
	}
	waitFor(t, "its later change", func() bool { return len(p.snapshot()) == 1 })
	wantHandled(t, &p, "a later change, notified", "SET dev/7=new")

	// Host 0's rule deletes the key; host 1 lets it go at its next
	// complete scan (here the one after a reconnection); created again by
	// host 0's rule, it is rung for again. Before, a (member, key) was
	// rung for once: host 1 never heard of the key again (no rescan).
	if _, err := c.user.Set(ctx, []byte("make"), []byte("-7"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deletion", func() bool { return len(p.snapshot()) == 1 })
	wantHandled(t, &p, "the deletion, notified", "DELETE dev/7")
	m1.proxy.Cut()
	waitFor(t, "host 1 disconnected", func() bool {
		_, err := m1.client.Get(ctx, []byte("x"), protocol.CallOptions{})
		return errors.Is(err, protocol.ErrNotConnected)
	})
	m1.proxy.Heal()
	waitFor(t, "host 1 lets the deleted key go", func() bool {
		s := m1.host.Status()
		return len(s) == 1 && s[0].PatternKeys == 0
	})
	if _, err := c.user.Set(ctx, []byte("make"), []byte("7"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "host 1's rule gets the key created again", func() bool { return len(p.snapshot()) == 1 })
	wantHandled(t, &p, "created again", "SET dev/7=new resync")
}

// A member whose doorbell watch fails (the store timed out) watches it at
// a later step, and another member's ring then reaches its rules. Before,
// the roster and the doorbell were watched only when the member lease was
// taken, so a watch that failed once was never made again.
func TestGroupDoorbellWatchedAfterAFailure(t *testing.T) {
	b := brokertest.Start(t)
	hs := &hookStore{Client: newClient(t, b.Addr())}
	hs.key = ReservedPrefix + "group/g/found/" + hs.Client.ClientID()
	hs.failNotify.Store(1)
	var p handled
	rt := &goRuntime{}
	rt.register("p", patternRule(&p, "dev/*", abi.WatchOptions{}))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.gorule"), []byte("p"), 0o644); err != nil {
		t.Fatal(err)
	}
	h, err := New(Config{Store: hs, Runtimes: []abi.Runtime{rt}, Group: &GroupConfig{Name: "g", TTL: groupTestTTL},
		Rules:  map[string]RuleConfig{"p.gorule": {Rescan: RescanOff}},
		Logger: slog.New(slog.NewTextHandler(testutil.LogWriter(t), nil))})
	if err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "host", h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.LoadDir(ctx, dir); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rule running", func() bool { s := h.Status(); return len(s) == 1 && s[0].State == StateRunning })
	user := newClient(t, b.Addr())
	if _, err := user.Set(ctx, []byte("dev/9"), []byte("x"), protocol.SetOptions{}); err != nil { // after the rule's scan: no rescan finds it
		t.Fatal(err)
	}
	waitFor(t, "a ring reaching the rule", func() bool {
		if _, err := user.Set(ctx, []byte(hs.key), []byte("dev/9"), protocol.SetOptions{}); err != nil {
			t.Errorf("ring: %v", err)
		}
		return len(p.snapshot()) > 0
	})
	wantHandled(t, &p, "the rung key", "SET dev/9=x resync")
	if n := hs.notify.Load(); n < 2 {
		t.Errorf("%d KEYNOTIFY of the doorbell, want the failed one and another", n)
	}
}
