package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// A client's SET reaches a real rule through the store, and the rule's
// write appears.
func TestE2ERuleReacts(t *testing.T) {
	for _, sb := range sandboxes {
		t.Run(sb.kind, func(t *testing.T) {
			e := newE2E(t, sb)
			name := sb.file("react")
			e.loadRule(name, sb.source(t, "react", "v1"))
			e.set("react/in", "21")
			e.waitValue("react/out", "got 21")
			waitFor(t, "handled counted", func() bool { return e.ruleStatus(name).Handled == 1 })
			if s := e.ruleStatus(name); s.Failed != 0 || len(s.Watches) != 1 || s.Watches[0] != "react/in" || s.Kind != sb.kind {
				t.Fatalf("status %+v", s)
			}
		})
	}
}

// A rule is reloaded with a new version (another tag) in the middle of a
// stream of 1000 events: each event is handled exactly once, by one version
// or the other, and both versions handle some. The rule records event n with
// SET stream/handled/<n> NX and marks stream/dup when that finds n already
// there.
func TestE2EHotReloadStreamExactlyOnce(t *testing.T) {
	for _, sb := range sandboxes {
		modes := []string{"Load"}
		if sb.kind == "lua" {
			modes = append(modes, "WatchDir")
		}
		for _, mode := range modes {
			t.Run(sb.kind+"/"+mode, func(t *testing.T) { testReloadStream(t, sb, mode == "WatchDir") })
		}
	}
}

func testReloadStream(t *testing.T, sb sandbox, watchDir bool) {
	const n = 1000
	e := newE2E(t, sb)
	name := sb.file("stream")
	v1, v2 := sb.source(t, "stream", "v1"), sb.source(t, "stream", "v2")
	var p string
	if watchDir {
		p = e.writeRule(name, v1)
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan struct{})
		done := make(chan error, 1)
		go func() { done <- e.host.WatchDir(ctx, e.dir, ready) }()
		t.Cleanup(func() { cancel(); <-done })
		<-ready
		if len(e.host.Status()) != 1 {
			t.Fatalf("WatchDir loaded %d rules, want 1", len(e.host.Status()))
		}
	} else {
		p = e.loadRule(name, v1)
	}
	reloaded := func() bool { return len(e.logLines("rule reloaded", name)) > 0 }

	// The producer sends events 0..n-1 as fast as the store takes them. So
	// that the new version is sure to see some, it waits at 3n/5 until the
	// reload is done (in practice the reload comes much earlier).
	var wg sync.WaitGroup
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop); wg.Wait() }) // if the test ends early
	wg.Go(func() {
		for i := range n {
			select {
			case <-stop:
				return
			default:
			}
			if i == 3*n/5 {
				deadline := time.Now().Add(60 * time.Second)
				for !reloaded() {
					if time.Now().After(deadline) {
						t.Errorf("no reload after %d events", i)
						return
					}
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			_, err := e.user.Set(ctx, []byte("stream/in"), []byte(strconv.Itoa(i)), protocol.SetOptions{})
			cancel()
			if err != nil {
				t.Errorf("set stream/in %d: %v", i, err)
				return
			}
		}
	})
	waitFor(t, "stream under way", func() bool { return e.ruleStatus(name).Handled >= n/4 })
	if watchDir {
		e.writeRule(name, v2) // fsnotify sees it; the folder watcher reloads
	} else {
		if err := os.WriteFile(p, v2, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := e.host.Load(e.longCtx(), p); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	waitFor(t, "every event handled", func() bool { return e.ruleStatus(name).Handled >= n })

	// Read every record back (in parallel: 1000 round trips).
	tags := make([]string, n)
	var errs [8]error
	for w := range len(errs) {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := w; i < n; i += len(errs) {
				v, ok, err := e.lookup(ctx, "stream/handled/"+strconv.Itoa(i))
				if err != nil {
					errs[w] = err
					return
				}
				if ok {
					tags[i] = v
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for i, tag := range tags {
		if tag == "" {
			t.Errorf("event %d never handled", i)
		}
		count[tag]++
	}
	if dup, ok := e.get("stream/dup"); ok {
		t.Errorf("an event was handled twice (stream/dup = %s)", dup)
	}
	if count["v1"] == 0 || count["v2"] == 0 || count["v1"]+count["v2"] != n {
		t.Errorf("handled by v1: %d, by v2: %d; want both, %d in all", count["v1"], count["v2"], n)
	}
	s := e.ruleStatus(name)
	if s.Handled != n || s.Failed != 0 || s.Dropped != 0 || s.Disabled {
		t.Errorf("status %+v, want %d handled and nothing failed or dropped", s, n)
	}
	t.Logf("v1 handled %d events, v2 %d", count["v1"], count["v2"])
}

// failure is one way a rule can fail, and the kind the host reports.
type failure struct {
	rule  string // "fail-a" or "fail-m" (the one with a low Lua memory limit)
	value string // written to fail/<id>/in
	kind  string // in the "rule failed" log line
}

var failures = map[string][]failure{
	"lua":  {{"fail-a", "loop", "timeout"}, {"fail-a", "error", "error"}, {"fail-m", "bomb", "memory"}},
	"wasm": {{"fail-a", "loop", "timeout"}, {"fail-a", "panic", "crash"}, {"fail-a", "trap", "crash"}, {"fail-m", "bomb", "memory"}},
}

// An infinite loop, a panic or Lua error, a trap and a memory bomb each stop
// only the rule's handler call: the host reports it (a "rule failed" line
// with its kind, RuleStatus.Failed), another rule keeps handling events
// during and after it, and the failed rule handles its next event.
func TestE2EFailuresStopOnlyTheirRule(t *testing.T) {
	for _, sb := range sandboxes {
		t.Run(sb.kind, func(t *testing.T) {
			// A loop runs until the 2 s deadline. The Lua runtime measures
			// memory as growth of the whole process's heap during a call
			// (see runtime/lua), so the long loop runs in a rule with the
			// default limit, and the bomb in one whose low limit keeps it
			// small.
			const timeout = 2 * time.Second
			e := newE2E(t, sb, func(o *Config) {
				// The bomb rule gets a low memory limit and a long deadline,
				// so running out of memory is the only way its bomb can end
				// (a Go guest needs 2.3 MiB to start).
				o.Rules = map[string]RuleConfig{
					"fail-*":      {Timeout: timeout},
					"fail-m.*":    {Timeout: 60 * time.Second},
					"fail-m.lua":  {MemoryBytes: 8 << 20},
					"fail-m.wasm": {MemoryBytes: 16 << 20},
				}
			})
			healthyName := sb.file("healthy")
			for _, r := range []string{"fail-a", "fail-m"} {
				e.loadRule(sb.file(r), sb.source(t, r, "v1"))
			}
			e.loadRule(healthyName, sb.source(t, "healthy", "v1"))

			// The healthy rule answers a stream of pings throughout.
			var pongs atomic.Int64
			var pingErr error
			stop := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					want := "ping " + strconv.Itoa(i)
					if _, err := e.user.Set(ctx, []byte("healthy/in"), []byte(want), protocol.SetOptions{}); err != nil {
						pingErr = err
						return
					}
					for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
						v, _, err := e.lookup(ctx, "healthy/out")
						if err != nil {
							pingErr = err
							return
						}
						if v == want {
							break
						}
						if time.Now().After(deadline) {
							pingErr = fmt.Errorf("the healthy rule did not answer %q", want)
							return
						}
					}
					pongs.Add(1)
				}
			})
			stopPings := func() {
				select {
				case <-stop:
				default:
					close(stop)
				}
				wg.Wait()
			}
			t.Cleanup(stopPings)
			waitFor(t, "first pong", func() bool { return pongs.Load() > 0 })

			seen := map[string]int{} // "rule failed" lines so far, per rule and per rule and kind
			for i, f := range failures[sb.kind] {
				name := sb.file(f.rule)
				id := strings.TrimPrefix(f.rule, "fail-")
				failed := e.ruleStatus(name).Failed
				before := pongs.Load()
				e.set("fail/"+id+"/in", f.value)
				waitFor(t, f.value+" reported", func() bool { return e.ruleStatus(name).Failed == failed+1 })
				during := pongs.Load() - before
				// The failure is counted, then logged.
				seen[name]++
				seen[name+f.kind]++
				waitFor(t, f.value+" logged", func() bool { return len(e.logLines(`msg="rule failed"`, "rule="+name)) == seen[name] })
				if got := len(e.logLines(`msg="rule failed"`, "rule="+name, "kind="+f.kind)); got != seen[name+f.kind] {
					t.Errorf("%s: %d \"rule failed\" lines of %s with kind %s, want %d:\n%s", f.value, got, name, f.kind, seen[name+f.kind], e.logs)
				}
				// The failed rule handles its next event.
				next := "ok " + strconv.Itoa(i)
				e.set("fail/"+id+"/in", next)
				e.waitValue("fail/"+id+"/out", next)
				// The healthy rule kept going and still goes.
				waitFor(t, "pongs after "+f.value, func() bool { return pongs.Load() > before+during })
				if f.value == "loop" && during == 0 {
					t.Errorf("the healthy rule answered nothing while the other one looped for %v", timeout)
				}
				t.Logf("%s: %d pongs while it failed", f.value, during)
			}
			stopPings()
			if pingErr != nil {
				t.Fatal(pingErr)
			}
			if s := e.ruleStatus(healthyName); s.Failed != 0 || s.Dropped != 0 {
				t.Errorf("healthy rule: %+v", s)
			}
			for _, r := range []string{"fail-a", "fail-m"} {
				var want uint64
				for _, f := range failures[sb.kind] {
					if f.rule == r {
						want++
					}
				}
				waitFor(t, r+"'s last event counted", func() bool { return e.ruleStatus(sb.file(r)).Handled == want })
				if s := e.ruleStatus(sb.file(r)); s.Failed != want || s.Disabled {
					t.Errorf("%s: %+v, want %d failed and %d handled", r, s, want, want)
				}
			}
			if lines := e.logLines(`msg="rule failed"`, "rule="+healthyName); len(lines) != 0 {
				t.Errorf("the healthy rule was blamed: %v", lines)
			}
		})
	}
}

// A broken edit of a running rule is refused with an error naming the file
// and line (Lua) or the bad import (WebAssembly), and the running version
// keeps handling events.
func TestE2EBrokenEditKeepsOldVersion(t *testing.T) {
	for _, sb := range sandboxes {
		t.Run(sb.kind, func(t *testing.T) {
			e := newE2E(t, sb)
			name := sb.file("react")
			src := sb.source(t, "react", "v1")
			p := e.loadRule(name, src)
			e.set("react/in", "1")
			e.waitValue("react/out", "got 1")

			var broken []byte
			var want string
			line := 0
			if sb.kind == "lua" {
				// A stray "=" on the line before on_event.
				lines := strings.Split(string(src), "\n")
				for i, l := range lines {
					if strings.HasPrefix(l, "function on_event") {
						line = i + 1
						lines = append(lines[:i], append([]string{"local broken = = 1"}, lines[i:]...)...)
						break
					}
				}
				if line == 0 {
					t.Fatal("react.lua has no on_event")
				}
				broken = []byte(strings.Join(lines, "\n"))
				want = name + ":" + strconv.Itoa(line) + ":"
			} else {
				broken = unknownImportModule()
				want = "import ssrun.get_v2 is not part of ssrun ABI v1"
			}
			if err := os.WriteFile(p, broken, 0o644); err != nil {
				t.Fatal(err)
			}
			err := e.host.Load(e.longCtx(), p)
			var ce *abi.CompileError
			if !errors.As(err, &ce) || ce.Line != line || !strings.Contains(err.Error(), want) {
				t.Fatalf("loading the broken edit: %v; want a CompileError at line %d containing %q", err, line, want)
			}
			t.Logf("refused: %v", err)
			e.set("react/in", "2")
			e.waitValue("react/out", "got 2")
			waitFor(t, "both events counted", func() bool { return e.ruleStatus(name).Handled == 2 })
			if s := e.ruleStatus(name); s.Failed != 0 {
				t.Fatalf("status %+v", s)
			}
		})
	}
}

// A call the rule's permissions forbid comes back to the rule as a status
// (Lua: nil, message, "DENIED"; WebAssembly: StatusDenied), which the rule
// acts on: it writes the status to a key it may write.
func TestE2EPermissionDenialIsAStatus(t *testing.T) {
	for _, sb := range sandboxes {
		t.Run(sb.kind, func(t *testing.T) {
			e := newE2E(t, sb, func(o *Config) {
				// As in ssrun.yaml: rules: {"perm.*": {read: [...], ...}}
				o.Rules = map[string]RuleConfig{"perm.*": {Read: []string{"perm/**"}, Write: []string{"perm/out/*"}, Watch: []string{"perm/in"}, Lock: []string{}}}
			})
			name := sb.file("perm")
			e.loadRule(name, sb.source(t, "perm", "v1"))
			e.set("perm/in", "go")
			waitFor(t, "the rule's record of the denied read", func() bool { _, ok := e.get("perm/out/get"); return ok })
			for key, verb := range map[string]string{"perm/out/set": `set "secret/x"`, "perm/out/get": `get "secret/y"`} {
				v, _ := e.get(key)
				if want := "DENIED " + verb + ": not permitted for rule " + name; v != want {
					t.Errorf("%s = %q, want %q", key, v, want)
				}
			}
			if _, ok := e.get("secret/x"); ok {
				t.Error("the denied write was applied")
			}
			waitFor(t, "the event counted", func() bool { return e.ruleStatus(name).Handled == 1 })
			if s := e.ruleStatus(name); s.Failed != 0 {
				t.Errorf("status %+v", s)
			}
		})
	}
}

// Two hosts run the same lock rule. The lease moves to the second host
// behind the first one's back; the first, still believing it holds the
// lock, writes with its old token and the store refuses the write (FENCED),
// so the new holder's value stands.
func TestE2ELockFailoverFencedByStore(t *testing.T) {
	for _, sb := range sandboxes {
		t.Run(sb.kind, func(t *testing.T) {
			a := newE2E(t, sb)
			b := newE2EAt(t, a.addr, sb)
			a.loadRule(sb.file("lock-a"), sb.source(t, "lock-a", "v1"))
			b.loadRule(sb.file("lock-b"), sb.source(t, "lock-b", "v1"))

			a.set("lock/tick/a", "1")
			a.waitValue("lock/result/a", "OK:1")
			a.waitValue("shared", "a")
			holder, _ := a.get("leader")
			if want := a.client.ClientID() + ":" + sb.file("lock-a"); holder != want {
				t.Fatalf("lock held by %q, want %q", holder, want)
			}
			a.set("lock/tick/b", "1")
			a.waitValue("lock/result/b", "BUSY:1")

			a.leaseLostBehindHoldersBack("lock/")
		})
	}
}
