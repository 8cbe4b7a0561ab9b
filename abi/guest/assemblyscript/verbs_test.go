// Package assemblyscript tests the AssemblyScript guest SDK (assembly/,
// see README.md) through the real WebAssembly runtime: the committed test
// rule testdata/verbs.wasm (source testdata/verbs.ts), or the module named
// by $SSRUN_AS_VERBS_MODULE (rebuild-check.sh sets it to a module rebuilt
// from source with the pinned compiler), runs against an in-memory host.
package assemblyscript

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/ruletest"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// moduleEnv names a module to test instead of the committed one.
const moduleEnv = "SSRUN_AS_VERBS_MODULE"

var shared struct {
	once  sync.Once
	cache string // the runtime's compilation cache, removed by TestMain
	rt    *wasm.Runtime
	prog  abi.Program
	err   error
}

// closeShared closes the shared runtime and removes its cache, if a test
// made them.
func closeShared() error {
	var errs []error
	if shared.rt != nil {
		errs = append(errs, shared.rt.Close(context.Background()))
	}
	if shared.cache != "" {
		errs = append(errs, os.RemoveAll(shared.cache))
	}
	return errors.Join(errs...)
}

// program compiles the test rule once per test binary.
func program(t testing.TB) abi.Program {
	t.Helper()
	shared.once.Do(func() {
		path := filepath.Join("testdata", "verbs.wasm")
		if p := os.Getenv(moduleEnv); p != "" {
			path = p
		}
		src, err := os.ReadFile(path)
		if err != nil {
			shared.err = err
			return
		}
		if shared.cache, shared.err = os.MkdirTemp("", "ssrun-as-sdk-test-"); shared.err != nil {
			return
		}
		if shared.rt, shared.err = wasm.New(wasm.Config{CacheDir: shared.cache}); shared.err != nil {
			return
		}
		shared.prog, shared.err = shared.rt.Compile(context.Background(), path, src)
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
	if p := os.Getenv(moduleEnv); p != "" {
		t.Logf("testing %s ($%s) instead of the committed testdata/verbs.wasm", p, moduleEnv)
	}
	return shared.prog
}

func start(t testing.TB, h abi.Host, lim abi.Limits) abi.Script {
	t.Helper()
	s, err := program(t).Start(context.Background(), h, lim)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

// show is the rule's rendering of bytes.
func show(b []byte) string {
	if len(b) > 64 {
		f := fnv.New32a()
		f.Write(b)
		return fmt.Sprintf("%dB:%x", len(b), f.Sum32())
	}
	return fmt.Sprintf("x%x", b)
}

// runes is b decoded as the rule decodes text: each byte that does not
// start a valid UTF-8 sequence becomes U+FFFD.
func runes(b []byte) string { return string([]rune(string(b))) }

// v is the n-th version abitest hands out.
var v = abitest.Version

func lockL(h *abitest.Host) { _, _ = h.Lock(context.Background(), "L", time.Second, abi.LockOptions{}) }

// TestVerbs proves every verb of the AssemblyScript SDK is wired to the
// host: arguments (text and binary values), options, results, statuses and
// the host's messages (lastError).
func TestVerbs(t *testing.T) {
	big := bytes.Repeat([]byte{0, 0xff, 'x'}, 40<<10) // > the SDK's 16 KiB buffer: fetched with `result`
	longKey := strings.Repeat("k", 20<<10)            // its message exceeds the buffer too: `last_error` again
	binary := "\x00\x01\xff\r\n"
	cases := []struct {
		name  string
		setup func(h *abitest.Host)
		cmd   []string
		want  string
		check func(t *testing.T, h *abitest.Host)
	}{
		{name: "get text", setup: func(h *abitest.Host) { h.Put("k", []byte("héllo")) }, cmd: []string{"get", "k"},
			want: "get status=OK msg= value=x68c3a96c6c6f text=héllo version=" + v(1)},
		{name: "get binary", setup: func(h *abitest.Host) { h.Put("k", []byte(binary)) }, cmd: []string{"get", "k"},
			want: "get status=OK msg= value=x0001ff0d0a text=\x00\x01\ufffd\r\n version=" + v(1)},
		{name: "get empty value", setup: func(h *abitest.Host) { h.Put("e", []byte{}) }, cmd: []string{"get", "e"},
			want: "get status=OK msg= value=x text= version=" + v(1)},
		{name: "get 120 KiB via result", setup: func(h *abitest.Host) { h.Put("big", big) }, cmd: []string{"get", "big"},
			want: "get status=OK msg= value=" + show(big) + " text=" + runes(big) + " version=" + v(1),
			check: func(t *testing.T, h *abitest.Host) {
				if n := h.Calls(abi.FnGet); n != 1 {
					t.Errorf("host get called %d times; the result must be fetched, not asked again", n)
				}
			}},
		{name: "get not found", cmd: []string{"get", "absent"},
			want: `get status=NOT_FOUND msg=get "absent": not found value=x text= version=`},
		{name: "get not found, 20 KiB message", cmd: []string{"get", longKey},
			want: `get status=NOT_FOUND msg=get "` + longKey + `": not found value=x text= version=`},
		{name: "get denied", setup: func(h *abitest.Host) { h.Deny = func(_, key string) bool { return key == "secret" } },
			cmd: []string{"get", "secret"}, want: `get status=DENIED msg=get "secret": not permitted value=x text= version=`},

		{name: "set text", cmd: []string{"set", "k", "héllo", "0", "0", ""}, want: "set status=OK msg= version=" + v(1),
			check: func(t *testing.T, h *abitest.Host) {
				wantValue(t, h, "k", "héllo")
				if c, _ := h.LastCall(abi.FnSet); c.Set != (abi.SetOptions{}) {
					t.Errorf("options %+v, want none", c.Set)
				}
			}},
		{name: "set without options", cmd: []string{"set-default", "k", "v"}, want: "set-default status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) { wantValue(t, h, "k", "v") }},
		{name: "setBytes binary", cmd: []string{"setBytes", "k", binary, "0", "0", ""}, want: "setBytes status=OK msg= version=" + v(1),
			check: func(t *testing.T, h *abitest.Host) { wantValue(t, h, "k", binary) }},
		{name: "setBytes empty", cmd: []string{"setBytes", "k", "", "0", "0", ""}, want: "setBytes status=OK msg= version=" + v(1),
			check: func(t *testing.T, h *abitest.Host) { wantValue(t, h, "k", "") }},
		{name: "set nx not applied", setup: func(h *abitest.Host) { h.Put("k", []byte("old")) }, cmd: []string{"set", "k", "new", "1", "0", ""},
			want: `set status=NOT_APPLIED msg=set "k": not applied version=` + v(1),
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.Cond != abi.CondNX {
					t.Errorf("cond %v, want NX", c.Set.Cond)
				}
			}},
		{name: "set nex equal", setup: func(h *abitest.Host) { h.Put("k", []byte("same")) }, cmd: []string{"set", "k", "same", "2", "0", ""},
			want: "set status=OK msg= version=" + v(2)},
		{name: "set ttl", cmd: []string{"set", "k", "v", "0", "1500", ""}, want: "set status=OK msg= version=" + v(1),
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.TTL != 1500*time.Millisecond {
					t.Errorf("ttl %v, want 1.5s", c.Set.TTL)
				}
			}},
		{name: "set fenced", setup: lockL, cmd: []string{"set", "k", "v", "0", "0", "L"}, want: "set status=OK msg= version=" + v(2),
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnSet); c.Set.Fence != "L" {
					t.Errorf("fence %q, want L", c.Set.Fence)
				}
			}},
		{name: "set fence not held", cmd: []string{"set", "k", "v", "0", "0", "L"}, want: `set status=LOCK_LOST msg=fence "L": lock not held version=`},
		{name: "set negative ttl", cmd: []string{"set", "k", "v", "0", "-1", ""}, want: `set status=INVALID msg=set "k": ttl -1 ms out of range version=`},
		{name: "set empty key", cmd: []string{"set", "", "v", "0", "0", ""}, want: `set status=INVALID msg=set: empty key version=`},

		{name: "del", setup: func(h *abitest.Host) { h.Put("k", []byte("v")) }, cmd: []string{"del", "k", ""}, want: "del status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) { wantAbsent(t, h, "k") }},
		{name: "del not found", cmd: []string{"del", "k", ""}, want: `del status=NOT_FOUND msg=del "k": not found`},
		{name: "del fenced", setup: func(h *abitest.Host) { h.Put("k", []byte("v")); lockL(h) }, cmd: []string{"del", "k", "L"}, want: "del status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnDel); c.Del.Fence != "L" {
					t.Errorf("fence %q, want L", c.Del.Fence)
				}
			}},

		{name: "vdel text", setup: func(h *abitest.Host) { h.Put("k", []byte("héllo")) }, cmd: []string{"vdel", "k", "héllo", ""}, want: "vdel status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) { wantAbsent(t, h, "k") }},
		{name: "vdelBytes binary", setup: func(h *abitest.Host) { h.Put("k", []byte(binary)) }, cmd: []string{"vdelBytes", "k", binary, ""}, want: "vdelBytes status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) { wantAbsent(t, h, "k") }},
		{name: "vdel differs", setup: func(h *abitest.Host) { h.Put("k", []byte("other")) }, cmd: []string{"vdel", "k", "v", ""}, want: `vdel status=NOT_APPLIED msg=vdel "k": value differs`},
		{name: "vdel not found", cmd: []string{"vdel", "k", "v", ""}, want: `vdel status=NOT_FOUND msg=vdel "k": not found`},
		{name: "vdel fenced", setup: func(h *abitest.Host) { h.Put("k", []byte("v")); lockL(h) }, cmd: []string{"vdel", "k", "v", "L"}, want: "vdel status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnVDel); c.Del.Fence != "L" {
					t.Errorf("fence %q, want L", c.Del.Fence)
				}
			}},

		{name: "watch self", cmd: []string{"watch", "w", "self"}, want: "watch status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				if o, ok := h.Watches()["w"]; !ok || !o.Self {
					t.Errorf("watches %v, want w with self", h.Watches())
				}
			}},
		{name: "watch plain", cmd: []string{"watch", "w", ""}, want: "watch status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				if o, ok := h.Watches()["w"]; !ok || o.Self {
					t.Errorf("watches %v, want w without self", h.Watches())
				}
			}},
		{name: "watch empty key", cmd: []string{"watch", "", ""}, want: "watch status=INVALID msg=watch: empty key"},
		{name: "unwatch", cmd: []string{"unwatch", "init/watched"}, want: "unwatch status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				if _, ok := h.Watches()["init/watched"]; ok {
					t.Error("still watched")
				}
			}},
		{name: "unwatch not found", cmd: []string{"unwatch", "w"}, want: `unwatch status=NOT_FOUND msg=unwatch "w": not watched`},

		{name: "lock", cmd: []string{"lock", "L", "10000", "250"}, want: "lock status=OK msg= token=" + v(1),
			check: func(t *testing.T, h *abitest.Host) {
				if c, _ := h.LastCall(abi.FnLock); c.TTL != 10*time.Second || c.Lock.Wait != 250*time.Millisecond {
					t.Errorf("ttl %v wait %v, want 10s 250ms", c.TTL, c.Lock.Wait)
				}
			}},
		{name: "lock held by another", setup: func(h *abitest.Host) { h.Put("L", []byte("other holder")) }, cmd: []string{"lock", "L", "10000", "0"},
			want: `lock status=BUSY msg=lock "L": held by another holder token=`},
		{name: "lock negative wait", cmd: []string{"lock", "L", "1000", "-1"}, want: `lock status=INVALID msg=lock "L": wait -1 ms out of range token=`},
		{name: "unlock", setup: lockL, cmd: []string{"unlock", "L"}, want: "unlock status=OK msg="},
		{name: "unlock not held", cmd: []string{"unlock", "L"}, want: `unlock status=NOT_FOUND msg=unlock "L": not held`},

		{name: "timer text payload", setup: func(h *abitest.Host) { h.SetNow(1_000) }, cmd: []string{"timer-text", "door\x00é", "1500", "30000", "open-too-long"},
			want: "timer-text status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				got := h.Timers()["door\x00é"]
				if got.Deadline != 2_500 || got.Every != 30*time.Second || string(got.Payload) != "open-too-long" {
					t.Errorf("armed %+v", got)
				}
			}},
		{name: "timer without options", setup: func(h *abitest.Host) { h.SetNow(1_000) }, cmd: []string{"timer-default", "t", "0"},
			want: "timer-default status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				got, ok := h.Timers()["t"]
				if !ok || got.Deadline != 1_000 || got.Every != 0 || got.Payload == nil || len(got.Payload) != 0 {
					t.Errorf("armed %+v (%t), want due now, once, an empty payload", got, ok)
				}
			}},
		{name: "timer binary payload", setup: func(h *abitest.Host) { h.SetNow(1_000) }, cmd: []string{"timer", "t", "1500ms", "0s", binary},
			want: `timer status=OK msg=""`,
			check: func(t *testing.T, h *abitest.Host) {
				if got := h.Timers()["t"]; got.Deadline != 2_500 || string(got.Payload) != binary {
					t.Errorf("armed %+v", got)
				}
			}},
		{name: "timer negative every", cmd: []string{"timer-text", "t", "0", "-1", ""},
			want: `timer-text status=INVALID msg=timer "t": negative delay or period`},

		{name: "log", cmd: []string{"log", "8", "héllo\x00 world"}, want: "log status=OK msg=",
			check: func(t *testing.T, h *abitest.Host) {
				if !slices.Contains(h.Logs(), abitest.LogLine{Level: abi.LevelError, Msg: "héllo\x00 world"}) {
					t.Errorf("log line missing: %v", h.Logs())
				}
			}},
	}
	seen := map[string]bool{}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			s := start(t, h, abi.Limits{})
			if tc.setup != nil {
				tc.setup(h)
			}
			if got := ruletest.Run(t, s, h, ruletest.Command(tc.cmd[0], tc.cmd[1:]...)); got != tc.want {
				t.Errorf("report\n got %.300q\nwant %.300q", got, tc.want)
			}
			if tc.check != nil {
				tc.check(t, h)
			}
		})
		verb, _, _ := strings.Cut(tc.cmd[0], "-")
		seen[strings.TrimSuffix(verb, "Bytes")] = true
	}
	for verb := range sharedTimerCases(t) {
		seen[verb] = true
	}
	for verb := range sharedPatternCases(t) {
		seen[verb] = true
	}
	for _, verb := range abi.Verbs() {
		if !seen[verb] {
			t.Errorf("verb %s has no case", verb)
		}
	}
}

// sharedTimerCases runs the shared cases of timer, cancel and now
// (ruletest.VerbCases), byte for byte, and checks they saw every verb
// succeed and timer and cancel return every status. It returns the verbs
// run. The one case skipped arms a name that is not UTF-8: names are
// strings in this SDK, as keys are ("timer text payload" arms a binary-safe
// UTF-8 name).
func sharedTimerCases(t *testing.T) map[string]bool {
	revision2 := []string{abi.FnTimer, abi.FnCancel, abi.FnNow}
	statuses := map[string]map[string]bool{}
	for _, tc := range ruletest.VerbCases() {
		if !slices.Contains(revision2, tc.Cmd[0]) {
			continue
		}
		if tc.Cmd[0] == abi.FnTimer && !utf8.ValidString(tc.Cmd[1]) {
			t.Logf("skipped %q: timer names are strings in this SDK", tc.Name)
			continue
		}
		t.Run("shared/"+tc.Name, func(t *testing.T) {
			h := abitest.New()
			verb, st := ruletest.RunVerbCase(t, tc, start(t, h, abi.Limits{}), h)
			if statuses[verb] == nil {
				statuses[verb] = map[string]bool{}
			}
			statuses[verb][st] = true
		})
	}
	for _, verb := range revision2 {
		if !statuses[verb]["OK"] {
			t.Errorf("verb %s: no OK case", verb)
		}
		for _, st := range abi.Statuses() {
			if verb != abi.FnNow && st != abi.StatusBufferTooSmall && st != abi.StatusOK && !statuses[verb][st.String()] {
				t.Errorf("verb %s: status %s not covered", verb, st)
			}
		}
	}
	out := map[string]bool{}
	for verb := range statuses {
		out[verb] = true
	}
	return out
}

func wantValue(t *testing.T, h *abitest.Host, key, want string) {
	t.Helper()
	if got, ok := h.Value(key); !ok || string(got) != want {
		t.Errorf("%s = %q (present %t), want %q", key, got, ok, want)
	}
}

func wantAbsent(t *testing.T, h *abitest.Host, key string) {
	t.Helper()
	if got, ok := h.Value(key); ok {
		t.Errorf("%s = %q, want absent", key, got)
	}
}

// TestLoad: the watch declared at top level (in _initialize) reached the
// host with its option.
func TestLoad(t *testing.T) {
	h := abitest.New()
	start(t, h, abi.Limits{})
	if o, ok := h.Watches()["init/watched"]; !ok || !o.Self {
		t.Fatalf("watches after start %v, want init/watched with self", h.Watches())
	}
}

// TestEvents: the event record reaches the handler intact, TIMER events
// with their deadline and late flag.
func TestEvents(t *testing.T) {
	h := abitest.New()
	s := start(t, h, abi.Limits{})
	big := bytes.Repeat([]byte{0, 0xff, '\n'}, 50<<10)
	// The events of the other runtimes' tests (a timer on time and a late
	// one among them), then those particular to this SDK's UTF-8 decoding.
	for _, ev := range append(ruletest.Events(bytes.Repeat([]byte{0xff, 'b'}, 40)), []abi.Event{
		{Key: "event", Op: abi.OpSet, Value: []byte("héllo"), Version: "001732000000000:00001:StateStore"},
		{Key: "event", Op: abi.OpSet, Value: []byte("\x00v\xff"), Version: "v"},
		{Key: "event", Op: abi.OpSet, Value: []byte("ok \U0001d11e \u20ac \xe2\x82| \xc0\xaf \xed\xa0\x80 \xf4\x90\x80\x80 \xf0\x9f\x98 \x80 end"), Version: "v"},
		{Key: "event", Op: abi.OpSet, Value: []byte{}, Resync: true},
		{Key: "event", Op: abi.OpSet, Value: big, Version: "v"},
		{Key: "event", Op: abi.OpDelete, Version: "v2", Resync: true},
		{Key: "event", Op: abi.OpLockLost},
		{Key: "event", Op: abi.OpTimer, Value: []byte("open-too-long"), Deadline: 1_732_000_000_123},
		{Key: "event", Op: abi.OpSet, Value: []byte("last"), Version: "v9", Coalesced: 41},
		{Key: "event", Op: abi.OpDelete, Version: "v10", Coalesced: 1},
	}...) {
		want := fmt.Sprintf("event op=%s key=%s value=%s text=%s version=%s resync=%t deadline=%d late=%t",
			ev.Op, ev.Key, show(ev.Value), runes(ev.Value), ev.Version, ev.Resync, ev.Deadline, ev.Late) + coalescedSuffix(ev)
		if got := ruletest.Run(t, s, h, ev); got != want {
			t.Errorf("got  %.200q\nwant %.200q", got, want)
		}
	}
}

// TestHandlerFailure: a handler returning a status fails the event with it
// and logs it with the host's message of the call before.
func TestHandlerFailure(t *testing.T) {
	h := abitest.New()
	s := start(t, h, abi.Limits{})
	err := s.Handle(context.Background(), ruletest.Command("fail", "5"))
	if !errors.Is(err, abi.ErrCrashed) || !strings.Contains(err.Error(), "status DENIED") {
		t.Fatalf("Handle: %v; want ErrCrashed with status DENIED", err)
	}
	want := abitest.LogLine{Level: abi.LevelError, Msg: `handler: DENIED: get "absent": not found`}
	if !slices.Contains(h.Logs(), want) {
		t.Errorf("logs %v, want %v", h.Logs(), want)
	}
}

// TestAbort: abort() (a throw) logs its message through the host, traps,
// and the next event runs in a fresh instance.
func TestAbort(t *testing.T) {
	h := abitest.New()
	s := start(t, h, abi.Limits{})
	err := s.Handle(context.Background(), ruletest.Command("abort"))
	if !errors.Is(err, abi.ErrCrashed) {
		t.Fatalf("Handle: %v; want ErrCrashed", err)
	}
	found := false
	for _, l := range h.Logs() {
		found = found || l.Level == abi.LevelError && strings.HasPrefix(l.Msg, "abort: the rule aborts at testdata/verbs.ts:")
	}
	if !found {
		t.Errorf("no abort line in logs %v", h.Logs())
	}
	if got := ruletest.Run(t, s, h, ruletest.Command("get", "absent")); !strings.HasPrefix(got, "get status=NOT_FOUND") {
		t.Errorf("after the abort: %s", got)
	}
}

// TestEventValueOutlivesHandler: an event's value kept by the rule stays
// intact after the handler returns, a full collection and new allocations.
func TestEventValueOutlivesHandler(t *testing.T) {
	h := abitest.New()
	s := start(t, h, abi.Limits{})
	value := []byte("value\x00kept")
	ev := abi.Event{Key: "keep", Op: abi.OpSet, Value: value}
	if err := s.Handle(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if got, want := ruletest.Run(t, s, h, ruletest.Command("kept")), "kept value="+show(value); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

// TestEventBuffersReleased: the buffers of handled events are unpinned
// and collected: 64 events of 512 KiB pass under an 8 MiB memory limit.
func TestEventBuffersReleased(t *testing.T) {
	h := abitest.New()
	s := start(t, h, abi.Limits{MemoryBytes: 8 << 20})
	ev := abi.Event{Key: "noop", Op: abi.OpSet, Value: make([]byte, 512<<10)}
	for i := range 64 {
		if err := s.Handle(context.Background(), ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
	}
}

// coalescedSuffix is what testdata/verbs.ts adds to an event's line for
// its coalesced count (kept up to the largest i32).
func coalescedSuffix(ev abi.Event) string {
	if ev.Coalesced == 0 {
		return ""
	}
	return fmt.Sprintf(" coalesced=%d", min(ev.Coalesced, math.MaxInt32))
}
