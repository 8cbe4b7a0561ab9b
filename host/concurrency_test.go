package host

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// keyTracker wraps a handler and records, per key, whether two calls of
// the key ever ran at once, and how many calls ran at once at most.
type keyTracker struct {
	mu      sync.Mutex
	running map[string]int
	calls   int
	twice   int // calls that started while a call of their key ran
	most    int // calls at once, at most
}

func newKeyTracker() *keyTracker { return &keyTracker{running: map[string]int{}} }

func (k *keyTracker) wrap(handle func(context.Context, abi.Host, abi.Event) error) func(context.Context, abi.Host, abi.Event) error {
	return func(ctx context.Context, h abi.Host, ev abi.Event) error {
		k.mu.Lock()
		if k.running[ev.Key] > 0 {
			k.twice++
		}
		k.running[ev.Key]++
		k.calls++
		k.most = max(k.most, k.calls)
		k.mu.Unlock()
		defer func() {
			k.mu.Lock()
			k.running[ev.Key]--
			k.calls--
			k.mu.Unlock()
		}()
		return handle(ctx, h, ev)
	}
}

func (k *keyTracker) result() (twice, most int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.twice, k.most
}

// Property (issue 28): under every mode and every concurrency from 1 to
// 8, random bursts over few keys into a rule stuck until the burst is
// over, with a random small mailbox: each key's versions reach the rule in
// increasing order, never two calls of one key at once, and once settled
// the rule's last version of each key is the store's last.
func TestConcurrencyBurstProperty(t *testing.T) {
	for _, mode := range []string{ModeQueued, ModeLatest, ModeRestart} {
		for conc := 1; conc <= 8; conc++ {
			t.Run(fmt.Sprintf("%s/%d", mode, conc), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(uint64(conc), uint64(len(mode))))
				keys := 40 * (1 + rng.IntN(2))
				b := newBurst(keys, keys*(1+rng.IntN(6)))
				b.open = make(chan struct{})
				kt := newKeyTracker()
				r := b.rule()
				r.handle = kt.wrap(r.handle)
				h, user := overloadHost(t, r, RuleConfig{Mailbox: 1 + rng.IntN(16), Mode: mode, Concurrency: conc})
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				last, err := b.send(ctx, user)
				if err != nil {
					t.Fatal(err)
				}
				waitFor(t, "every change routed", func() bool { return h.Stats().Notifications >= uint64(b.changes) })
				close(b.open)
				waitFor(t, "the rule settled", func() bool {
					st, _ := ruleStatus(h, "burst.gorule")
					return b.settled(h, "burst") && st.InFlight == 0 // an event handed to the pool is neither queued nor busy yet
				})
				if n := b.stale(last); n != 0 {
					t.Fatalf("%d of %d keys stale", n, keys)
				}
				b.mu.Lock()
				backwards := b.backwards
				b.mu.Unlock()
				if backwards != 0 {
					t.Fatalf("%d events went back in their key's versions", backwards)
				}
				twice, most := kt.result()
				if twice != 0 {
					t.Fatalf("%d calls ran while a call of their key ran", twice)
				}
				if most > conc {
					t.Fatalf("%d calls at once, concurrency %d", most, conc)
				}
				if st, _ := ruleStatus(h, "burst.gorule"); st.InFlight != 0 || st.Dropped != 0 {
					t.Fatalf("settled with %d in flight, %d dropped", st.InFlight, st.Dropped)
				}
			})
		}
	}
}

// blockUntil is a handler that blocks each call until n calls are in at
// once (then all return), or release is closed.
type blockUntil struct {
	n       int
	in      atomic.Int32
	all     chan struct{}
	once    sync.Once
	release chan struct{}
}

func newBlockUntil(n int) *blockUntil {
	return &blockUntil{n: n, all: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockUntil) handle(ctx context.Context, _ abi.Host, ev abi.Event) error {
	if int(b.in.Add(1)) >= b.n {
		b.once.Do(func() { close(b.all) })
	}
	select {
	case <-b.all:
	case <-b.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// With concurrency N a rule handles N events of different keys at once:
// each call blocks until N are in, which one call at a time never reaches.
// While they run, the rule's status shows them in flight.
func TestConcurrencyOverlapsKeys(t *testing.T) {
	const n = 4
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"overlap*.gorule": {Concurrency: n, Timeout: time.Minute}}
	})
	b := newBlockUntil(n + 1) // never reached: the status is read while they block
	keys := []string{"o/0", "o/1", "o/2", "o/3"}
	e.load("overlap", goRule{init: watchInit(keys...), handle: b.handle})
	for _, k := range keys {
		e.set(k, "v")
	}
	waitFor(t, "4 calls in at once", func() bool { return b.in.Load() == n })
	if st := e.status("overlap"); st.InFlight != n {
		t.Fatalf("status: %d in flight, want %d", st.InFlight, n)
	}
	close(b.release)
	waitFor(t, "all handled", func() bool { return e.status("overlap").Handled == n })
	if st := e.status("overlap"); st.InFlight != 0 {
		t.Fatalf("status: %d in flight after, want 0", st.InFlight)
	}

	// A second rule: calls that wait for each other complete only
	// together, so concurrency is not a count the status makes up.
	b2 := newBlockUntil(n)
	e.load("overlap2", goRule{init: watchInit(keys...), handle: b2.handle})
	for _, k := range keys {
		e.set(k, "w")
	}
	waitFor(t, "4 calls that wait for each other all handled", func() bool { return e.status("overlap2").Handled == n })
}

// One key's events never run at once, and run in order, however high the
// concurrency: while a call of k blocks, k's next changes wait (Queued),
// and another key is handled meanwhile.
func TestConcurrencyOneKeyAtATime(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"one.gorule": {Concurrency: 8, Timeout: time.Minute}}
	})
	release := make(chan struct{})
	kt := newKeyTracker()
	var mu sync.Mutex
	var seen []string
	e.load("one", goRule{init: watchInit("k", "j"), handle: kt.wrap(func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		mu.Lock()
		seen = append(seen, ev.Key+"="+string(ev.Value))
		mu.Unlock()
		if ev.Key == "k" {
			if err := awaitRelease(ctx, release); err != nil {
				return err
			}
		}
		return nil
	})})
	e.set("k", "0")
	waitFor(t, "k's first call in", func() bool { return e.status("one").InFlight == 1 })
	e.set("k", "1")
	e.set("k", "2")
	e.set("j", "x")
	// j's call counts as handled a moment before the pool takes it off
	// its calls in flight: wait for both.
	waitFor(t, "j handled while k blocks, k's 2 changes waiting and 1 call in flight", func() bool {
		st := e.status("one")
		return st.Handled == 1 && st.Queued == 2 && st.InFlight == 1
	})
	close(release)
	waitFor(t, "all handled", func() bool { return e.status("one").Handled == 4 })
	if twice, _ := kt.result(); twice != 0 {
		t.Fatalf("%d calls of a key ran while another of it ran", twice)
	}
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(seen, ","), "k=0,j=x,k=1,k=2"; got != want {
		t.Fatalf("handled %s, want %s", got, want)
	}
}

// A rule of concurrency > 1 whose top level writes fails to load with an
// error that says why: the first instance's write is the rule's, the
// others' would repeat it.
func TestConcurrencyReplicaInitWriteRefused(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"initw.gorule": {Concurrency: 3}}
	})
	var starts atomic.Int32
	e.rt.register("initw", goRule{init: func(ctx context.Context, h abi.Host) error {
		starts.Add(1)
		if err := h.Watch(ctx, "w", abi.WatchOptions{}); err != nil {
			return err
		}
		_, err := h.Set(ctx, "initw/out", []byte("x"), abi.SetOptions{})
		return err
	}})
	p := filepath.Join(e.dir, "initw.gorule")
	e.write(p, "initw")
	err := e.host.Load(e.ctx(), p)
	if err == nil {
		t.Fatal("loaded a rule of concurrency 3 whose top level writes")
	}
	for _, want := range []string{"instance 2 of 3", "concurrency 3", "top level runs once per instance", "write from a handler"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not say %q", err, want)
		}
	}
	if n := starts.Load(); n != 2 {
		t.Fatalf("%d instances started, want 2 (the first, then the refused one)", n)
	}
	// Reads and watches are fine in a replica's top level; writes in
	// handlers are.
	e.rt.register("initr", goRule{init: func(ctx context.Context, h abi.Host) error {
		if _, err := h.Get(ctx, "nothing"); err != nil && abi.StatusOf(err) != abi.StatusNotFound {
			return err
		}
		return h.Watch(ctx, "r", abi.WatchOptions{})
	}, handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(ctx, "initr/out", ev.Value, abi.SetOptions{})
		return err
	}})
	e.reload(p, "initr")
	e.set("r", "1")
	e.waitValue("initr/out", "1")
}

// A reload of a rule of concurrency > 1 replaces every instance of its
// pool: the old version's instances are closed, and every event after the
// reload is handled by the new one's; a call in flight finishes first.
func TestConcurrencyReload(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"re.gorule": {Concurrency: 3, Timeout: time.Minute}}
	})
	var closed atomic.Int32
	version := func(v string, block chan struct{}) goRule {
		return goRule{init: watchInit("a", "b", "c"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			if block != nil {
				select {
				case <-block:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			_, err := h.Set(ctx, "re/"+ev.Key, []byte(v+":"+string(ev.Value)), abi.SetOptions{})
			return err
		}}
	}
	block := make(chan struct{})
	e.rt.register("re", version("v1", block))
	p := filepath.Join(e.dir, "re.gorule")
	e.reload(p, "re")
	e.set("a", "1")
	e.set("b", "1")
	waitFor(t, "2 calls in flight", func() bool { return e.status("re").InFlight == 2 })
	v2 := version("v2", nil)
	v2.closed = func() { closed.Add(1) }
	e.rt.register("re2", v2)
	e.write(p, "re2")
	loaded := make(chan error, 1)
	go func() { loaded <- e.host.Load(e.ctx(), p) }()
	close(block) // the reload waits for the calls in flight
	if err := <-loaded; err != nil {
		t.Fatal(err)
	}
	e.waitValue("re/a", "v1:1")
	e.waitValue("re/b", "v1:1")
	for _, k := range []string{"a", "b", "c"} {
		e.set(k, "2")
	}
	for _, k := range []string{"a", "b", "c"} {
		e.waitValue("re/"+k, "v2:2")
	}
	e.write(p, "re")
	e.rt.register("re", version("v3", nil))
	if err := e.host.Load(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	if n := closed.Load(); n != 3 {
		t.Fatalf("%d of v2's 3 instances closed by the reload", n)
	}
	e.set("c", "3")
	e.waitValue("re/c", "v3:3")
}

// The host's bound on concurrent calls holds across a rule's pool: with
// MaxConcurrentCalls 2, a rule of concurrency 4 never runs more than 2
// calls at once, and handles all.
func TestConcurrencyGateBounds(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.MaxConcurrentCalls = 2
		o.Rules = map[string]RuleConfig{"gated.gorule": {Concurrency: 4, Timeout: time.Minute}}
	})
	kt := newKeyTracker()
	release := make(chan struct{})
	var in atomic.Int32
	keys := []string{"g/0", "g/1", "g/2", "g/3"}
	e.load("gated", goRule{init: watchInit(keys...), handle: kt.wrap(func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		in.Add(1)
		return awaitRelease(ctx, release)
	})})
	for _, k := range keys {
		e.set(k, "v")
	}
	// The other two are handed to the pool and wait for a place in the gate.
	waitFor(t, "2 calls in, 4 in flight", func() bool {
		st := e.status("gated")
		return in.Load() == 2 && st.InFlight == 4 && st.Queued == 0
	})
	close(release)
	waitFor(t, "all handled", func() bool { return e.status("gated").Handled == 4 })
	if _, most := kt.result(); most != 2 {
		t.Fatalf("%d calls at once, want the gate's 2", most)
	}
}

// Mode restart with concurrency: a change of a key cuts the running call
// of that key only, not the call of another key running at once.
func TestConcurrencyRestartPerKey(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"rk.gorule": {Concurrency: 2, Mode: ModeRestart, Timeout: time.Minute}}
	})
	release := make(chan struct{})
	var mu sync.Mutex
	var cut, done []string
	e.load("rk", goRule{init: watchInit("a", "b"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		if string(ev.Value) == "slow" {
			select {
			case <-release:
			case <-ctx.Done():
				mu.Lock()
				cut = append(cut, ev.Key)
				mu.Unlock()
				return ctx.Err()
			}
		}
		mu.Lock()
		done = append(done, ev.Key+"="+string(ev.Value))
		mu.Unlock()
		return nil
	}})
	e.set("a", "slow")
	e.set("b", "slow")
	waitFor(t, "a and b in at once", func() bool { return e.status("rk").InFlight == 2 })
	e.set("a", "fast")
	waitFor(t, "a cut and its newer change handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(done) == 1
	})
	if st := e.status("rk"); st.Restarted != 1 || st.InFlight != 1 {
		t.Fatalf("restarted %d, in flight %d; want a's call cut and b's running", st.Restarted, st.InFlight)
	}
	close(release)
	waitFor(t, "b handled", func() bool { return e.status("rk").Handled == 2 })
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(cut, ",") != "a" || strings.Join(done, ",") != "a=fast,b=slow" {
		t.Fatalf("cut %v, done %v; want a cut, then a=fast and b=slow", cut, done)
	}
}

// Stopping a rule of concurrency > 1 waits for every call in flight.
func TestConcurrencyStopWaitsForCalls(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"st.gorule": {Concurrency: 3, Timeout: time.Minute}}
	})
	var in, out atomic.Int32
	p := e.load("st", goRule{init: watchInit("a", "b", "c"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		in.Add(1)
		defer out.Add(1)
		<-ctx.Done() // the remove cancels it
		return ctx.Err()
	}})
	for _, k := range []string{"a", "b", "c"} {
		e.set(k, "v")
	}
	waitFor(t, "3 calls in", func() bool { return in.Load() == 3 })
	if err := e.host.Remove(e.ctx(), p); err != nil {
		t.Fatal(err)
	}
	if n := out.Load(); n != 3 {
		t.Fatalf("remove returned with %d of 3 calls returned", n)
	}
}

// A call of a pool stuck past its deadline plus the grace is abandoned
// when a reload needs the rule, as with concurrency 1: the new version
// runs, with its own pool.
func TestConcurrencyAbandonStuckCall(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"ab.gorule": {Concurrency: 2, Timeout: 50 * time.Millisecond, Grace: 50 * time.Millisecond}}
	})
	stuck := make(chan struct{})
	defer close(stuck)
	e.rt.register("ab", goRule{init: watchInit("s", "t"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		if ev.Key == "s" {
			<-stuck // ignores its deadline
		}
		_, err := h.Set(context.WithoutCancel(ctx), "ab/"+ev.Key, ev.Value, abi.SetOptions{})
		return err
	}})
	p := filepath.Join(e.dir, "ab.gorule")
	e.reload(p, "ab")
	e.set("s", "1")
	e.set("t", "1")
	e.waitValue("ab/t", "1") // the other instance handles t meanwhile
	waitFor(t, "the rule stuck", func() bool { return e.status("ab").Stuck })
	e.rt.register("ab2", goRule{init: watchInit("t"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(context.WithoutCancel(ctx), "ab/"+ev.Key, []byte("v2:"+string(ev.Value)), abi.SetOptions{}) // not bound by the short deadline
		return err
	}})
	e.reload(p, "ab2")
	if st := e.status("ab"); st.Abandoned != 1 {
		t.Fatalf("abandoned %d, want 1", st.Abandoned)
	}
	e.set("t", "2")
	e.waitValue("ab/t", "v2:2")
}

// A pool abandoned for a stuck call loses only the calls running: an
// event another instance had taken and not started (it waited for a place
// in the gate) goes back to the mailbox and the next version handles it.
// (It was lost with the pool: TestConcurrencyAbandonedPoolKeepsWaitingEvents
// fails on the old code.)
func TestConcurrencyAbandonedPoolKeepsWaitingEvents(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.MaxConcurrentCalls = 1
		o.Rules = map[string]RuleConfig{"ab.gorule": {Concurrency: 2, Timeout: 50 * time.Millisecond, Grace: 50 * time.Millisecond}}
	})
	stuck := make(chan struct{})
	defer close(stuck)
	e.rt.register("ab", goRule{init: watchInit("s", "t"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		if ev.Key == "s" {
			<-stuck // ignores its deadline, and holds the host's one place
		}
		_, err := h.Set(context.WithoutCancel(ctx), "ab/"+ev.Key, ev.Value, abi.SetOptions{})
		return err
	}})
	p := filepath.Join(e.dir, "ab.gorule")
	e.reload(p, "ab")
	e.set("s", "1")
	waitFor(t, "s's call in", func() bool { return e.status("ab").InFlight == 1 })
	e.set("t", "1")
	waitFor(t, "t taken by the other instance, waiting for a place", func() bool { return e.status("ab").InFlight == 2 })
	waitFor(t, "the rule stuck", func() bool { return e.status("ab").Stuck })
	e.rt.register("ab2", goRule{init: watchInit("t"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(ctx, "ab/"+ev.Key, []byte("v2:"+string(ev.Value)), abi.SetOptions{})
		return err
	}})
	e.reload(p, "ab2") // abandons the pool
	e.waitValue("ab/t", "v2:1")
	if st := e.status("ab"); st.Abandoned != 1 || st.Failed != 1 {
		t.Errorf("abandoned %d, failed %d; want 1 and 1 (the stuck call only)", st.Abandoned, st.Failed)
	}
}

// In a serial host (ssrun test, replay) a rule of concurrency > 1 runs
// one call at a time, in the order of its events: the same in every run.
func TestConcurrencySerialHost(t *testing.T) {
	e, _ := newSerialEnv(t)
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, map[string]RuleConfig{"ser.gorule": {Concurrency: 4}}); err != nil {
		t.Fatal(err)
	}
	var j handled
	var running sync.Mutex
	keys := []string{"in/0", "in/1", "in/2", "in/3"}
	e.load("ser", goRule{init: watchInit(keys...), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		if !running.TryLock() {
			t.Errorf("%s runs while another call runs", ev.Key)
			return nil
		}
		defer running.Unlock()
		j.add("%s=%s", ev.Key, ev.Value)
		return nil
	}})
	e.idle()
	var want []string
	for round := range 5 {
		release, err := e.host.Hold(e.ctx())
		if err != nil {
			t.Fatal(err)
		}
		want = want[:0]
		for i := range 3 {
			for _, k := range keys {
				v := fmt.Sprint(round*10 + i)
				e.set(k, v)
				want = append(want, k+"="+v)
			}
		}
		release()
		e.idle()
		if got := j.take(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("round %d: handled %q, want %q", round, got, want)
		}
	}
}

// A lost lock's LOCK_LOST event runs alone in a pool: it waits for the
// calls in flight, and nothing else starts while it runs.
func TestConcurrencyLockLostRunsAlone(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"ll.gorule": {Concurrency: 3, Timeout: time.Minute}}
	})
	release := make(chan struct{})
	var mu sync.Mutex
	running, lostWith, lost := 0, -1, 0
	e.load("ll", goRule{init: watchInit("take", "x", "y"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		mu.Lock()
		running++
		if ev.Op == abi.OpLockLost {
			lostWith, lost = running-1, lost+1
		}
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		switch {
		case ev.Op == abi.OpLockLost:
			return nil
		case ev.Key == "take":
			_, err := h.Lock(ctx, "leader", 300*time.Millisecond, abi.LockOptions{})
			return err
		}
		return awaitRelease(ctx, release)
	}})
	e.set("take", "1")
	waitFor(t, "the lock taken", func() bool { return len(e.status("ll").Locks) == 1 })
	e.set("x", "1")
	e.set("y", "1")
	waitFor(t, "x and y in", func() bool { mu.Lock(); defer mu.Unlock(); return running == 2 })
	e.set("leader", "someone else") // the next renewal finds it taken
	waitFor(t, "the lock lost", func() bool { return strings.Contains(e.logs.String(), "lock lost") })
	e.set("take", "2") // waits behind the LOCK_LOST
	mu.Lock()
	if lost != 0 {
		t.Errorf("LOCK_LOST ran while x and y ran")
	}
	mu.Unlock()
	close(release)
	waitFor(t, "LOCK_LOST handled", func() bool { mu.Lock(); defer mu.Unlock(); return lost == 1 })
	waitFor(t, "all handled", func() bool { st := e.status("ll"); return st.Handled+st.Failed == 5 }) // take 2 finds the lock taken
	mu.Lock()
	defer mu.Unlock()
	if lostWith != 0 {
		t.Fatalf("LOCK_LOST ran with %d other calls", lostWith)
	}
}

// A Lua rule of concurrency 2 end to end: its instances handle two keys
// at once (each handler spins until the other has started, through the
// store), keep their own globals, and a version whose top level writes
// fails to load, saying why.
func TestConcurrencyLua(t *testing.T) {
	e := newE2E(t, sandbox{kind: "lua"}, func(o *Config) {
		o.Rules = map[string]RuleConfig{"*.lua": {Concurrency: 2, Timeout: time.Minute}}
	})
	e.loadRule("pair.lua", []byte(`local ss = require("ssrun")
ss.watch("a")
ss.watch("b")
calls = 0
function on_event(ev)
  calls = calls + 1
  ss.set("in/" .. ev.key, "yes")
  local other = ev.key == "a" and "b" or "a"
  while ss.get("in/" .. other) == nil do end -- only a call running at once ends this
  ss.set("out/" .. ev.key, ev.value .. " after " .. calls .. " calls")
end
`))
	e.set("a", "1")
	e.set("b", "1")
	e.waitValue("out/a", "1 after 1 calls")
	e.waitValue("out/b", "1 after 1 calls") // each instance counted its own call
	p := e.writeRule("pair.lua", []byte(`local ss = require("ssrun")
ss.watch("a")
ss.set("started", "yes")
function on_event(ev) end
`))
	err := e.host.Load(e.ctx(), p)
	if err == nil || !strings.Contains(err.Error(), "concurrency 2, so its top level runs once per instance") {
		t.Fatalf("a top level that writes at concurrency 2: %v", err)
	}
	if st := e.ruleStatus("pair.lua"); st.State != StateReloadFailed {
		t.Fatalf("state %q, want the previous version running", st.State)
	}
}

// Timers in a pool: a periodic timer's firings are handled one at a time
// (keyed by its name), next to the calls of keys, and keep firing.
func TestConcurrencyTimers(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"tm.gorule": {Concurrency: 3}}
	})
	kt := newKeyTracker()
	var fired atomic.Int32
	e.load("tm", goRule{init: watchInit("arm", "k"), handle: kt.wrap(func(ctx context.Context, h abi.Host, ev abi.Event) error {
		switch {
		case ev.Op == abi.OpTimer:
			fired.Add(1)
			return nil
		case ev.Key == "arm":
			return h.Timer(ctx, "tick", time.Millisecond, abi.TimerOptions{Every: 2 * time.Millisecond})
		}
		_, err := h.Set(ctx, "k/out", ev.Value, abi.SetOptions{})
		return err
	})})
	e.set("arm", "1")
	waitFor(t, "the timer fired 20 times", func() bool { return fired.Load() >= 20 })
	e.set("k", "1")
	e.waitValue("k/out", "1")
	if twice, _ := kt.result(); twice != 0 {
		t.Fatalf("%d calls ran while a call of their key or timer ran", twice)
	}
	if st := e.status("tm"); st.Failed != 0 || st.Timers != 1 {
		t.Fatalf("failed %d, timers %d; want 0 and the periodic one", st.Failed, st.Timers)
	}
}
