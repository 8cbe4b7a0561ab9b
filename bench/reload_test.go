package bench

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/experimental"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

// reloadSubject is a rule file that the reload benchmark rewrites: src
// gives its content per tag, and a SET of prefix/trigger makes the running
// version write "<tag>:<value>" to prefix/tagged.
type reloadSubject struct {
	name, prefix string
	file         string // in the rules folder
	src          func(tag string) []byte
}

// reloader watches a rules folder with host.WatchDir and observes the
// tagged keys through a client of its own.
type reloader struct {
	e   *env
	obs *protocol.Client
	seq int
}

// nativeAndLua are the reload subjects of the native Go rule and the Lua
// rule.
func nativeAndLua(tb testing.TB) []reloadSubject {
	return []reloadSubject{
		{name: "native", prefix: "native", file: "reload.native", src: func(tag string) []byte { return []byte(tag) }},
		{name: "lua", prefix: "lua", file: "reload.lua", src: func(tag string) []byte { return luaRule(tb, tag) }},
	}
}

// newReloader writes version A of each subject into e.dir, runs
// e.host.WatchDir on it (stopped when the test ends), registers
// notifications of the subjects' tagged keys and checks that version A
// handles each subject's trigger.
func newReloader(e *env, subs []reloadSubject) *reloader {
	e.tb.Helper()
	for _, s := range subs {
		e.write(s.file, s.src("A"), false)
	}
	r := &reloader{e: e, obs: dial(e.tb, e.addr, "observer", e.log)}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range subs {
		if err := r.obs.KeyNotify(ctx, []byte(s.prefix+"/tagged"), protocol.CallOptions{}); err != nil {
			e.tb.Fatal(err)
		}
	}
	watchCtx, stop := context.WithCancel(context.Background())
	ready := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := e.host.WatchDir(watchCtx, e.dir, ready); err != nil {
			e.tb.Errorf("watch rules folder: %v", err)
		}
	})
	e.tb.Cleanup(func() { stop(); wg.Wait() }) // before the host closes
	select {
	case <-ready:
	case <-time.After(time.Minute):
		e.tb.Fatal("rules folder not loaded in a minute")
	}
	for _, s := range subs {
		if got := r.handledBy(s); got != "A" {
			e.tb.Fatalf("%s: first version tagged %q, want A", s.name, got)
		}
	}
	return r
}

// handledBy sets s's trigger to a new sequence number and returns the tag
// of the version that handled it.
func (r *reloader) handledBy(s reloadSubject) string {
	r.e.tb.Helper()
	r.seq++
	want := ":" + strconv.Itoa(r.seq)
	r.e.set(s.prefix+"/trigger", want[1:])
	timeout := time.NewTimer(30 * time.Second)
	defer timeout.Stop()
	for {
		select {
		case ev := <-r.obs.Events():
			if ev.Kind == protocol.EventNotify && string(ev.Key) == s.prefix+"/tagged" && strings.HasSuffix(string(ev.Value), want) {
				return strings.TrimSuffix(string(ev.Value), want)
			}
		case <-timeout.C:
			r.e.tb.Fatalf("%s: trigger %s not handled in 30 s", s.name, want[1:])
		}
	}
}

// reload writes version tag of s's file and returns the time from the
// start of the write until a trigger is handled by that version; triggers
// are sent one at a time, a millisecond apart.
func (r *reloader) reload(s reloadSubject, tag string) time.Duration {
	r.e.tb.Helper()
	src := s.src(tag)
	t0 := time.Now()
	r.e.write(s.file, src, false)
	for r.handledBy(s) != tag {
		if time.Since(t0) > time.Minute {
			r.e.tb.Fatalf("%s: version %s not running a minute after its file was written", s.name, tag)
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(t0)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median returns the median of ds (sorted in place).
func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

// BenchmarkReload is hot-reload latency: from the start of writing a new
// version of a rule file into a folder watched by host.WatchDir to the new
// version handling an event (a trigger key is set every millisecond or so
// until the output carries the new version's tag). WatchDir acts once the
// write is over (the file closed; package fsfollow), not after a fixed
// quiet time. One op is one reload of each subject, in turn: the native Go
// rule (the BASELINE: the host's own cost), the Lua rule, and the Go
// WebAssembly rule, alternating between two versions (A, B) of each; the
// WebAssembly versions are compiled once during an unmeasured warm-up
// round, so later loads find them kept, compiled and checked, by content
// hash (wasm.Config.Keep). After the loop, one never-seen WebAssembly
// module (C) shows the cold cost, compile included, and the same bytes
// compiled by a bare wazero runtime (no cache) its compile share. Reports
// <subject>-p50-ms and -max-ms, the ratio of medians <subject>-x-native,
// wasm-cold-ms, wasm-cold-compile-ms and wasm-cold-compile-share. Run it
// with -benchtime=20x for 20 reloads of each.
func BenchmarkReload(b *testing.B) {
	prebuild(b, "A", "B", "C")
	e := newEnvCache(b, host.RuleConfig{}, b.TempDir()) // a fresh cache: C is never seen
	subs := append(nativeAndLua(b),
		reloadSubject{name: "wasm", prefix: "wasm", file: "reload.wasm", src: func(tag string) []byte { return wasmGuest(b, tag) }})
	r := newReloader(e, subs)
	for _, s := range subs {
		r.reload(s, "B") // warm-up: compile B, then back to A
		r.reload(s, "A")
	}
	lat := make([][]time.Duration, len(subs))
	b.ResetTimer()
	for i := range b.N {
		tag := "B"
		if i%2 == 1 {
			tag = "A"
		}
		for k, s := range subs {
			lat[k] = append(lat[k], r.reload(s, tag))
		}
	}
	b.StopTimer()
	cold := r.reload(subs[2], "C")
	base := median(lat[0])
	for k, s := range subs {
		m := median(lat[k]) // sorts lat[k]
		b.ReportMetric(ms(m), s.name+"-p50-ms")
		b.ReportMetric(ms(lat[k][len(lat[k])-1]), s.name+"-max-ms")
		if k > 0 {
			b.ReportMetric(float64(m)/float64(base), s.name+"-x-native")
		}
	}
	b.ReportMetric(ms(cold), "wasm-cold-ms")
	compile := wazeroCompile(b, subs[2].src("C"))
	b.ReportMetric(ms(compile), "wasm-cold-compile-ms")
	b.ReportMetric(float64(compile)/float64(cold), "wasm-cold-compile-share")
	e.checkClean()
}

// wazeroCompile returns how long a wazero runtime of its own, without a
// compilation cache, takes to compile src, with the compilation workers
// runtime/wasm uses.
func wazeroCompile(tb testing.TB, src []byte) time.Duration {
	tb.Helper()
	ctx := experimental.WithCompilationWorkers(context.Background(), min(runtime.GOMAXPROCS(0), 4))
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfigCompiler())
	defer rt.Close(ctx)
	t0 := time.Now()
	cm, err := rt.CompileModule(ctx, src)
	d := time.Since(t0)
	if err != nil {
		tb.Fatal(err)
	}
	_ = cm.Close(ctx)
	return d
}

// TestReload reloads the native and Lua bench rules once through
// host.WatchDir and checks that the new version handles the next event.
// (The WebAssembly versions differ only by their -ldflags tag, which
// TestRulesEndToEnd checks; compiling a second Go guest would add seconds.)
func TestReload(t *testing.T) {
	e := newEnv(t, host.RuleConfig{})
	subs := nativeAndLua(t)
	r := newReloader(e, subs)
	for _, s := range subs {
		r.reload(s, "B")
		if got := r.handledBy(s); got != "B" {
			t.Errorf("%s: after the reload an event was handled by version %q, want B", s.name, got)
		}
	}
	e.checkClean()
}
