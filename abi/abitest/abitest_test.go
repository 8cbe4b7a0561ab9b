package abitest_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

var ctx = context.Background()

// verb calls one verb of h and returns its result (value, version or
// token; "" for verbs without one) and error.
type verb func(h *abitest.Host) (string, error)

func get(key string) verb {
	return func(h *abitest.Host) (string, error) {
		v, err := h.Get(ctx, key)
		if v.Data == nil && v.Version == "" {
			return "", err
		}
		return string(v.Data) + "@" + v.Version, err
	}
}

func set(key, value string, opts abi.SetOptions) verb {
	return func(h *abitest.Host) (string, error) { return h.Set(ctx, key, []byte(value), opts) }
}

func del(key string, opts abi.DelOptions) verb {
	return func(h *abitest.Host) (string, error) { return "", h.Del(ctx, key, opts) }
}

func vdel(key, value string, opts abi.DelOptions) verb {
	return func(h *abitest.Host) (string, error) { return "", h.VDel(ctx, key, []byte(value), opts) }
}

func watch(key string, self bool) verb {
	return func(h *abitest.Host) (string, error) { return "", h.Watch(ctx, key, abi.WatchOptions{Self: self}) }
}

func unwatch(key string) verb {
	return func(h *abitest.Host) (string, error) { return "", h.Unwatch(ctx, key) }
}

func lock(name string, ttl time.Duration) verb {
	return func(h *abitest.Host) (string, error) { return h.Lock(ctx, name, ttl, abi.LockOptions{}) }
}

func unlock(name string) verb {
	return func(h *abitest.Host) (string, error) { return "", h.Unlock(ctx, name) }
}

// must runs setup verbs that have to succeed.
func must(t *testing.T, h *abitest.Host, vs ...verb) {
	t.Helper()
	for i, v := range vs {
		if _, err := v(h); err != nil {
			t.Fatalf("setup step %d: %v", i, err)
		}
	}
}

// TestVerbs checks the store semantics of every verb: results, versions,
// statuses and messages, and what is stored afterwards.
func TestVerbs(t *testing.T) {
	v := abitest.Version
	fenced := abi.SetOptions{Fence: "L"}
	for _, tc := range []struct {
		name   string
		setup  []verb
		call   verb
		want   string // the result
		status abi.Status
		msg    string // the error message, when status is not OK
		check  func(t *testing.T, h *abitest.Host)
	}{
		{name: "get", setup: []verb{set("k", "v\x00", abi.SetOptions{})}, call: get("k"), want: "v\x00@" + v(1)},
		{name: "get not found", call: get("k"), status: abi.StatusNotFound, msg: `get "k": not found`},
		{name: "get empty key", call: get(""), status: abi.StatusInvalid, msg: "get: empty key"},

		{name: "set", call: set("k", "v", abi.SetOptions{}), want: v(1), check: value("k", "v", true)},
		{name: "set replaces", setup: []verb{set("k", "a", abi.SetOptions{})}, call: set("k", "b", abi.SetOptions{}), want: v(2), check: value("k", "b", true)},
		{name: "set nx absent", call: set("k", "v", abi.SetOptions{Cond: abi.CondNX}), want: v(1), check: value("k", "v", true)},
		{name: "set nx present", setup: []verb{set("k", "old", abi.SetOptions{})}, call: set("k", "new", abi.SetOptions{Cond: abi.CondNX}),
			want: v(1), status: abi.StatusNotApplied, msg: `set "k": not applied`, check: value("k", "old", true)},
		{name: "set nex equal", setup: []verb{set("k", "same", abi.SetOptions{})}, call: set("k", "same", abi.SetOptions{Cond: abi.CondNEX}), want: v(2)},
		{name: "set nex differs", setup: []verb{set("k", "old", abi.SetOptions{})}, call: set("k", "new", abi.SetOptions{Cond: abi.CondNEX}),
			want: v(1), status: abi.StatusNotApplied, msg: `set "k": not applied`, check: value("k", "old", true)},
		{name: "set bad condition", call: set("k", "v", abi.SetOptions{Cond: abi.CondNEX + 1}), status: abi.StatusInvalid, msg: `set "k": bad options`, check: value("k", "", false)},
		{name: "set negative ttl", call: set("k", "v", abi.SetOptions{TTL: -time.Millisecond}), status: abi.StatusInvalid, msg: `set "k": bad options`},
		{name: "set fenced", setup: []verb{lock("L", time.Second)}, call: set("k", "v", fenced), want: v(2), check: value("k", "v", true)},
		{name: "set fence not held", call: set("k", "v", fenced), status: abi.StatusLockLost, msg: `fence "L": lock not held`, check: value("k", "", false)},
		{name: "set empty key", call: set("", "v", abi.SetOptions{}), status: abi.StatusInvalid, msg: "set: empty key"},

		{name: "del", setup: []verb{set("k", "v", abi.SetOptions{})}, call: del("k", abi.DelOptions{}), check: value("k", "", false)},
		{name: "del not found", call: del("k", abi.DelOptions{}), status: abi.StatusNotFound, msg: `del "k": not found`},
		{name: "del fence not held", setup: []verb{set("k", "v", abi.SetOptions{})}, call: del("k", abi.DelOptions{Fence: "L"}),
			status: abi.StatusLockLost, msg: `fence "L": lock not held`, check: value("k", "v", true)},

		{name: "vdel", setup: []verb{set("k", "v", abi.SetOptions{})}, call: vdel("k", "v", abi.DelOptions{}), check: value("k", "", false)},
		{name: "vdel differs", setup: []verb{set("k", "v", abi.SetOptions{})}, call: vdel("k", "w", abi.DelOptions{}),
			status: abi.StatusNotApplied, msg: `vdel "k": value differs`, check: value("k", "v", true)},
		{name: "vdel not found", call: vdel("k", "v", abi.DelOptions{}), status: abi.StatusNotFound, msg: `vdel "k": not found`},

		{name: "watch", call: watch("w", true), check: func(t *testing.T, h *abitest.Host) {
			if o, ok := h.Watches()["w"]; !ok || !o.Self {
				t.Errorf("watches %v, want w with self", h.Watches())
			}
		}},
		{name: "watch again", setup: []verb{watch("w", true)}, call: watch("w", false), check: func(t *testing.T, h *abitest.Host) {
			if o, ok := h.Watches()["w"]; !ok || o.Self {
				t.Errorf("watches %v, want w without self", h.Watches())
			}
		}},
		{name: "unwatch", setup: []verb{watch("w", false)}, call: unwatch("w"), check: func(t *testing.T, h *abitest.Host) {
			if len(h.Watches()) != 0 {
				t.Errorf("watches %v, want none", h.Watches())
			}
		}},
		{name: "unwatch not watched", call: unwatch("w"), status: abi.StatusNotFound, msg: `unwatch "w": not watched`},

		{name: "lock", call: lock("L", time.Second), want: v(1), check: value("L", "abitest", true)},
		{name: "lock held returns its token", setup: []verb{lock("L", time.Second)}, call: lock("L", time.Second), want: v(1)},
		{name: "lock busy", setup: []verb{set("L", "other", abi.SetOptions{})}, call: lock("L", time.Second),
			status: abi.StatusBusy, msg: `lock "L": held by another holder`},
		{name: "lock zero ttl", call: lock("L", 0), status: abi.StatusInvalid, msg: `lock "L": ttl must be positive`},
		{name: "unlock", setup: []verb{lock("L", time.Second)}, call: unlock("L"), check: value("L", "", false)},
		{name: "unlock not held", call: unlock("L"), status: abi.StatusNotFound, msg: `unlock "L": not held`},
		{name: "set over a key written fenced", setup: []verb{lock("L", time.Second), set("k", "v", fenced)}, call: set("k", "w", abi.SetOptions{}),
			status: abi.StatusFenced, msg: `set "k": a fencing token is required for this request`, check: value("k", "v", true)},
		{name: "del of a key written fenced", setup: []verb{lock("L", time.Second), set("k", "v", fenced)}, call: del("k", abi.DelOptions{}),
			status: abi.StatusFenced, msg: `del "k": a fencing token is required for this request`, check: value("k", "v", true)},
		{name: "del fenced of a key written fenced", setup: []verb{lock("L", time.Second), set("k", "v", fenced)}, call: del("k", abi.DelOptions{Fence: "L"}),
			check: value("k", "", false)},
		{name: "a delete takes a version", setup: []verb{set("k", "a", abi.SetOptions{}), del("k", abi.DelOptions{})}, call: set("k", "b", abi.SetOptions{}), want: v(3)},
		{name: "set ttl (the clock stands still)", call: set("k", "v", abi.SetOptions{TTL: time.Microsecond}), want: v(1), check: value("k", "v", true)},
		{name: "lost lock fences", setup: []verb{lock("L", time.Second), func(h *abitest.Host) (string, error) { h.LoseLock("L"); return "", nil }},
			call: set("k", "v", fenced), status: abi.StatusLockLost, msg: `fence "L": lock not held`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			must(t, h, tc.setup...)
			got, err := tc.call(h)
			if got != tc.want {
				t.Errorf("result %q, want %q", got, tc.want)
			}
			if st := abi.StatusOf(err); st != tc.status {
				t.Fatalf("error %v (status %s), want status %s", err, st, tc.status)
			}
			if err != nil && err.Error() != tc.msg {
				t.Errorf("message %q, want %q", err.Error(), tc.msg)
			}
			if tc.check != nil {
				tc.check(t, h)
			}
		})
	}
}

// value checks what Value returns for key.
func value(key, want string, present bool) func(t *testing.T, h *abitest.Host) {
	return func(t *testing.T, h *abitest.Host) {
		t.Helper()
		got, ok := h.Value(key)
		if ok != present || ok && string(got) != want {
			t.Errorf("Value(%q) = %q, %t; want %q, %t", key, got, ok, want, present)
		}
	}
}

// TestStoreHelpers checks Put, Value, Log, Logs and Deny.
func TestStoreHelpers(t *testing.T) {
	h := abitest.New()
	if ver := h.Put("k", []byte("v")); ver != abitest.Version(1) {
		t.Errorf("Put version %q, want %q", ver, abitest.Version(1))
	}
	b := []byte("x")
	h.Put("b", b)
	b[0] = 'y' // Put copies
	if got, _ := h.Value("b"); string(got) != "x" {
		t.Errorf("Value(b) = %q after the caller changed its slice, want x", got)
	}
	if got, err := h.Get(ctx, "k"); err != nil || string(got.Data) != "v" || got.Version != abitest.Version(1) {
		t.Errorf("Get(k) = %+v, %v", got, err)
	}
	if _, err := h.Lock(ctx, "L", time.Second, abi.LockOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Set(ctx, "f", []byte("1"), abi.SetOptions{Fence: "L"}); err != nil {
		t.Fatal(err)
	}
	if ver := h.Put("f", []byte("2")); ver != "" {
		t.Errorf("Put over a key written fenced returned %q, want \"\" (refused)", ver)
	}
	if got, _ := h.Value("f"); string(got) != "1" {
		t.Errorf("Value(f) = %q after a refused Put, want 1", got)
	}

	h.Log(abi.LevelWarn, "one")
	h.Log(-2, "two")
	want := []abitest.LogLine{{Level: abi.LevelWarn, Msg: "one"}, {Level: -2, Msg: "two"}}
	if got := h.Logs(); !slices.Equal(got, want) {
		t.Errorf("Logs %v, want %v", got, want)
	}

	h.Deny = func(verb, key string) bool { return verb == abi.FnSet && key == "secret" }
	if _, err := h.Set(ctx, "secret", nil, abi.SetOptions{}); abi.StatusOf(err) != abi.StatusDenied || err.Error() != `set "secret": not permitted` {
		t.Errorf("denied set: %v", err)
	}
	if _, err := h.Get(ctx, "secret"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("get of a key Deny allows: %v, want NOT_FOUND", err)
	}
}

// TestLastCall checks that each verb's last call is recorded with its
// arguments, including calls the store refuses.
func TestLastCall(t *testing.T) {
	h := abitest.New()
	for _, verb := range abi.Verbs() {
		if c, ok := h.LastCall(verb); ok {
			t.Errorf("%s recorded (%+v) before any call", verb, c)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	value := []byte("v\x00")
	setOpts := abi.SetOptions{Cond: abi.CondNEX, TTL: time.Second, Fence: "F"}
	_, _ = h.Set(dctx, "s", value, setOpts) // refused: fence not held
	value[0] = 'X'                          // the record is a copy
	_, _ = h.Get(ctx, "g")
	_ = h.Del(ctx, "d", abi.DelOptions{Fence: "F"})
	_ = h.VDel(ctx, "vd", []byte{}, abi.DelOptions{})
	_ = h.Watch(ctx, "w", abi.WatchOptions{Self: true})
	_ = h.Unwatch(ctx, "")
	_, _ = h.Lock(dctx, "L", 2*time.Second, abi.LockOptions{Wait: time.Millisecond})
	_ = h.Unlock(ctx, "U")
	h.Log(abi.LevelError, "m")
	_ = h.Timer(ctx, "T", time.Second, abi.TimerOptions{Every: time.Minute, Payload: []byte("p")})
	_ = h.Cancel(ctx, "C")
	_ = h.Now()
	_, _ = h.Keys(ctx, "k*", abi.KeysOptions{Limit: 7})
	_ = h.WatchPattern(ctx, "wp*", abi.WatchOptions{Self: true})
	_ = h.UnwatchPattern(ctx, "up*")

	for verb, want := range map[string]abitest.Call{
		abi.FnGet:            {Key: "g"},
		abi.FnSet:            {Key: "s", Value: []byte("v\x00"), Set: setOpts, HasDeadline: true},
		abi.FnDel:            {Key: "d", Del: abi.DelOptions{Fence: "F"}},
		abi.FnVDel:           {Key: "vd", Value: []byte{}},
		abi.FnWatch:          {Key: "w", Watch: abi.WatchOptions{Self: true}},
		abi.FnUnwatch:        {Key: ""},
		abi.FnLock:           {Key: "L", TTL: 2 * time.Second, Lock: abi.LockOptions{Wait: time.Millisecond}, HasDeadline: true},
		abi.FnUnlock:         {Key: "U"},
		abi.FnLog:            {Level: abi.LevelError, Msg: "m"},
		abi.FnTimer:          {Key: "T", Delay: time.Second, Timer: abi.TimerOptions{Every: time.Minute, Payload: []byte("p")}},
		abi.FnCancel:         {Key: "C"},
		abi.FnKeys:           {Key: "k*", Keys: abi.KeysOptions{Limit: 7}},
		abi.FnWatchPattern:   {Key: "wp*", Watch: abi.WatchOptions{Self: true}},
		abi.FnUnwatchPattern: {Key: "up*"},
	} {
		got, ok := h.LastCall(verb)
		if !ok || fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", want) {
			t.Errorf("LastCall(%s) = %#v, %t\nwant %#v", verb, got, ok, want)
		}
	}
	if c, _ := h.LastCall(abi.FnVDel); c.Value == nil {
		t.Error("vdel's empty value recorded as nil")
	}

	_, _ = h.Get(ctx, "g2")
	if c, _ := h.LastCall(abi.FnGet); c.Key != "g2" {
		t.Errorf("LastCall(get).Key = %q after a second get, want g2", c.Key)
	}
	for _, verb := range abi.Verbs() {
		if n := h.Calls(verb); n != map[bool]int{true: 2, false: 1}[verb == abi.FnGet] {
			t.Errorf("Calls(%s) = %d", verb, n)
		}
	}
}

// TestFail checks an injected failure: returned as is before the store is
// touched, counted and recorded like a call, other verbs unaffected, and
// ended by Fail(verb, nil).
func TestFail(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		verb string
		call verb
	}{
		{abi.FnGet, get("k")},
		{abi.FnSet, set("k", "new", abi.SetOptions{})},
		{abi.FnDel, del("k", abi.DelOptions{})},
		{abi.FnVDel, vdel("k", "old", abi.DelOptions{})},
		{abi.FnWatch, watch("k", false)},
		{abi.FnUnwatch, unwatch("w")},
		{abi.FnLock, lock("k2", time.Second)},
		{abi.FnUnlock, unlock("L")},
	} {
		t.Run(tc.verb, func(t *testing.T) {
			h := abitest.New()
			must(t, h, set("k", "old", abi.SetOptions{}), watch("w", false), lock("L", time.Second))
			calls := h.Calls(tc.verb)
			h.Fail(tc.verb, boom)
			if _, err := tc.call(h); err != boom {
				t.Fatalf("error %v, want the injected one as is", err)
			}
			if got := h.Calls(tc.verb); got != calls+1 {
				t.Errorf("Calls = %d, want %d", got, calls+1)
			}
			if _, ok := h.LastCall(tc.verb); !ok {
				t.Error("the failed call was not recorded")
			}
			// The store is as the setup left it.
			if got, ok := h.Value("k"); !ok || string(got) != "old" {
				t.Errorf("k = %q (present %t), want old", got, ok)
			}
			if _, ok := h.Value("k2"); ok {
				t.Error("k2 was locked")
			}
			if _, ok := h.Watches()["w"]; !ok || len(h.Watches()) != 1 {
				t.Errorf("watches %v, want only w", h.Watches())
			}
			if _, ok := h.Value("L"); !ok {
				t.Error("L was unlocked")
			}
			// Only that verb fails.
			if _, err := h.Get(ctx, "k"); tc.verb != abi.FnGet && err != nil {
				t.Errorf("get while %s fails: %v", tc.verb, err)
			}
			h.Fail(tc.verb, nil)
			if _, err := tc.call(h); err == boom {
				t.Error("still failing after Fail(verb, nil)")
			}
		})
	}

	h := abitest.New()
	h.Fail(abi.FnLog, boom)
	h.Log(abi.LevelInfo, "still logged")
	if len(h.Logs()) != 1 {
		t.Errorf("logs %v, want the line despite Fail(log)", h.Logs())
	}
}

// TestReset checks that Reset empties everything New would not have.
func TestReset(t *testing.T) {
	h := abitest.New()
	must(t, h, set("k", "v", abi.SetOptions{}), watch("w", false), lock("L", time.Second))
	h.Log(abi.LevelInfo, "line")
	h.Fail(abi.FnGet, errors.New("boom"))
	h.Deny = func(string, string) bool { return true }

	h.Reset()
	if _, ok := h.Value("k"); ok {
		t.Error("k survived Reset")
	}
	if len(h.Watches()) != 0 || len(h.Logs()) != 0 {
		t.Errorf("watches %v, logs %v after Reset", h.Watches(), h.Logs())
	}
	for _, verb := range abi.Verbs() {
		if n := h.Calls(verb); n != 0 {
			t.Errorf("Calls(%s) = %d after Reset", verb, n)
		}
		if _, ok := h.LastCall(verb); ok {
			t.Errorf("LastCall(%s) recorded after Reset", verb)
		}
	}
	if h.Deny != nil {
		t.Error("Deny survived Reset")
	}
	if _, err := h.Get(ctx, "k"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Errorf("get after Reset: %v, want NOT_FOUND (no injected failure)", err)
	}
	if _, err := h.Set(ctx, "k", nil, abi.SetOptions{Fence: "L"}); abi.StatusOf(err) != abi.StatusLockLost {
		t.Errorf("fenced set after Reset: %v, want LOCK_LOST (lock gone)", err)
	}
	if ver, err := h.Set(ctx, "k", nil, abi.SetOptions{}); err != nil || ver != abitest.Version(1) {
		t.Errorf("first set after Reset: %q, %v; want %q", ver, err, abitest.Version(1))
	}
}

// TestConcurrent runs verbs, Reset, Fail and the readers from several
// goroutines (for the race detector).
func TestConcurrent(t *testing.T) {
	h := abitest.New()
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			key := fmt.Sprint("k", i)
			for range 200 {
				_, _ = h.Set(ctx, key, []byte("v"), abi.SetOptions{})
				_, _ = h.Get(ctx, key)
				_, _ = h.Lock(ctx, key+"L", time.Second, abi.LockOptions{})
				h.Log(abi.LevelInfo, key)
				h.LastCall(abi.FnSet)
				h.Calls(abi.FnGet)
			}
		})
	}
	wg.Go(func() {
		for range 50 {
			h.Fail(abi.FnGet, errors.New("boom"))
			h.Reset()
		}
	})
	wg.Wait()
	h.Reset()
	if _, err := h.Set(ctx, "k", nil, abi.SetOptions{}); err != nil {
		t.Fatalf("set after the concurrent run: %v", err)
	}
}

// TestFailures checks the catalogue of injectable errors: every status a
// Host may return, each once as an *abi.Error naming the verb, and the two
// plain errors, each with the status abi.StatusOf gives it.
func TestFailures(t *testing.T) {
	fs := abitest.Failures(abi.FnDel)
	seen := map[string]bool{}
	injected := map[abi.Status]bool{}
	for _, f := range fs {
		if seen[f.Name] {
			t.Errorf("name %q twice", f.Name)
		}
		seen[f.Name] = true
		if st := abi.StatusOf(f.Err); st != f.Status {
			t.Errorf("%s: error %v has status %s, want %s", f.Name, f.Err, st, f.Status)
		}
		var e *abi.Error
		if errors.As(f.Err, &e) {
			injected[f.Status] = true
			if want := fmt.Sprintf("injected %s for del", f.Status); e.Msg != want || f.Name != "injected "+f.Status.String() {
				t.Errorf("%s: message %q, want %q", f.Name, e.Msg, want)
			}
		}
	}
	for _, st := range abi.Statuses() {
		if want := st != abi.StatusOK && st != abi.StatusBufferTooSmall; injected[st] != want {
			t.Errorf("status %s injected: %t, want %t", st, injected[st], want)
		}
	}
	if len(fs) != len(injected)+2 || !seen["plain error TIMEOUT"] || !seen["plain error INTERNAL"] {
		t.Errorf("failures %v, want the *abi.Errors and the two plain errors", fs)
	}
	if fs[len(fs)-2].Err != context.DeadlineExceeded {
		t.Errorf("TIMEOUT plain error %v, want context.DeadlineExceeded", fs[len(fs)-2].Err)
	}
}

func TestTimers(t *testing.T) {
	ctx := context.Background()
	h := abitest.New()
	h.SetNow(1_000)
	if got := h.Now(); got != 1_000 {
		t.Fatalf("Now = %d, want the set clock", got)
	}
	if err := h.Timer(ctx, "door", 1500*time.Millisecond, abi.TimerOptions{Payload: []byte("open")}); err != nil {
		t.Fatal(err)
	}
	if err := h.Timer(ctx, "tick", 0, abi.TimerOptions{Every: time.Second}); err != nil {
		t.Fatal(err)
	}
	h.SetNow(2_000)
	if err := h.Timer(ctx, "door", time.Second, abi.TimerOptions{Payload: []byte("re-armed")}); err != nil {
		t.Fatal(err)
	}
	got := h.Timers()
	if d := got["door"]; d.Deadline != 3_000 || string(d.Payload) != "re-armed" || d.Every != 0 {
		t.Fatalf("door = %+v, want re-armed at 3000", d)
	}
	if tk := got["tick"]; tk.Deadline != 1_000 || tk.Every != time.Second {
		t.Fatalf("tick = %+v", tk)
	}
	if c, _ := h.LastCall(abi.FnTimer); c.Key != "door" || c.Delay != time.Second || string(c.Timer.Payload) != "re-armed" {
		t.Fatalf("last timer call %+v", c)
	}
	if err := h.Cancel(ctx, "door"); err != nil {
		t.Fatal(err)
	}
	if err := h.Cancel(ctx, "door"); abi.StatusOf(err) != abi.StatusNotFound {
		t.Fatalf("second cancel: %v, want NOT_FOUND", err)
	}
	if err := h.Timer(ctx, "bad", -time.Second, abi.TimerOptions{}); abi.StatusOf(err) != abi.StatusInvalid {
		t.Fatalf("negative delay: %v, want INVALID", err)
	}
	if err := h.Timer(ctx, "", time.Second, abi.TimerOptions{}); abi.StatusOf(err) != abi.StatusInvalid {
		t.Fatalf("empty name: %v, want INVALID", err)
	}
	if h.Calls(abi.FnTimer) != 5 || h.Calls(abi.FnCancel) != 2 {
		t.Fatalf("calls: timer %d cancel %d", h.Calls(abi.FnTimer), h.Calls(abi.FnCancel))
	}
	h.Reset()
	if len(h.Timers()) != 0 || h.Now() == 2_000 {
		t.Fatal("Reset kept timers or the set clock")
	}
}
