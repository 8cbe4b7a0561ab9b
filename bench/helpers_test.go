package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/gobuild"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/runtime/plugin"
	"github.com/ssrun/ssrun/runtime/wasm"
)

// testDir holds what this test binary builds (guests, plugins) and the
// shared WebAssembly compilation cache.
var testDir = gobuild.Dir{Prefix: "ssrun-bench-"}

// wasmGuest returns testdata/wasmrule built with tag (a different tag is a
// different module), once per test binary.
func wasmGuest(tb testing.TB, tag string) []byte {
	tb.Helper()
	path, err := testDir.WASM("wasmrule-"+tag+".wasm", "./testdata/wasmrule", "-X=main.tag="+tag)
	if err != nil {
		tb.Fatal(err)
	}
	src, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return src
}

// exe returns the path of testdata/<pkg> built as an executable, once per
// test binary.
func exe(tb testing.TB, pkg string) string {
	tb.Helper()
	path, err := testDir.Exe(pkg, "./testdata/"+pkg)
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// pluginRule returns the path of the built testdata/pluginrule.
func pluginRule(tb testing.TB) string {
	tb.Helper()
	return exe(tb, "pluginrule")
}

// prebuild builds the Go fixtures in parallel (a cold build of each takes
// seconds).
func prebuild(tb testing.TB, wasmTags ...string) {
	tb.Helper()
	var wg sync.WaitGroup
	for _, tag := range wasmTags {
		wg.Go(func() { wasmGuest(tb, tag) })
	}
	wg.Go(func() { pluginRule(tb) })
	wg.Go(func() { floorPluginPath(tb) })
	wg.Wait()
}

// luaRule returns testdata/rule.lua with its tag set to tag.
func luaRule(tb testing.TB, tag string) []byte {
	tb.Helper()
	src, err := os.ReadFile("testdata/rule.lua")
	if err != nil {
		tb.Fatal(err)
	}
	const decl = `local TAG = "A"`
	if !strings.Contains(string(src), decl) {
		tb.Fatalf("testdata/rule.lua has no line %s", decl)
	}
	return []byte(strings.Replace(string(src), decl, fmt.Sprintf("local TAG = %q", tag), 1))
}

// smallRule returns a hand-assembled WebAssembly rule of about 200 bytes
// that watches key at start and handles every event by returning 0:
//
//	(module
//	  (import "ssrun" "watch" (func $watch (param i32 i32 i32) (result i32)))
//	  (memory (export "memory") 1)
//	  (data (i32.const 16) "<key>")
//	  (func (export "ssrun_abi_version") (result i32) (i32.const 1))
//	  (func (export "ssrun_alloc") (param i32) (result i32) (i32.const 1024))
//	  (func (export "ssrun_on_event") (param i32 i32) (result i32) (i32.const 0))
//	  (func (export "_initialize")
//	    (drop (call $watch (i32.const 16) (i32.const <len key>) (i32.const 0)))))
//
// Events must fit in the 63 KiB above offset 1024.
func smallRule(key string) []byte {
	uleb := func(n int) []byte {
		var b []byte
		for {
			c := byte(n & 0x7f)
			n >>= 7
			if n == 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	name := func(s string) []byte { return append(uleb(len(s)), s...) }
	vec := func(items ...[]byte) []byte {
		out := uleb(len(items))
		for _, it := range items {
			out = append(out, it...)
		}
		return out
	}
	section := func(id byte, content []byte) []byte {
		return append(append([]byte{id}, uleb(len(content))...), content...)
	}
	body := func(code ...byte) []byte { // no locals, code, end
		b := append([]byte{0x00}, code...)
		b = append(b, 0x0b)
		return append(uleb(len(b)), b...)
	}
	const i32, fn, i32Const, call, drop = 0x7f, 0x60, 0x41, 0x10, 0x1a
	export := func(n string, kind, idx byte) []byte { return append(name(n), kind, idx) }
	i32c := func(v int) []byte { return append([]byte{i32Const}, uleb(v)...) } // v < 64
	initCode := append(append(append(i32c(16), i32c(len(key))...), i32c(0)...), call, 0, drop)

	m := []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}
	m = append(m, section(1, vec( // types
		[]byte{fn, 3, i32, i32, i32, 1, i32}, // 0 watch
		[]byte{fn, 0, 1, i32},                // 1 abi version
		[]byte{fn, 1, i32, 1, i32},           // 2 alloc
		[]byte{fn, 2, i32, i32, 1, i32},      // 3 on_event
		[]byte{fn, 0, 0},                     // 4 _initialize
	))...)
	m = append(m, section(2, vec(append(append(name(abi.ImportModule), name(abi.FnWatch)...), 0x00, 0)))...)
	m = append(m, section(3, vec([]byte{1}, []byte{2}, []byte{3}, []byte{4}))...)
	m = append(m, section(5, vec([]byte{0x00, 1}))...)
	m = append(m, section(7, vec(
		export("memory", 0x02, 0),
		export(abi.ExportABIVersion, 0x00, 1),
		export(abi.ExportAlloc, 0x00, 2),
		export(abi.ExportOnEvent, 0x00, 3),
		export("_initialize", 0x00, 4),
	))...)
	m = append(m, section(10, vec(
		body(i32Const, abi.Version),
		body(i32Const, 0x80, 0x08), // 1024
		body(i32Const, 0),
		body(initCode...),
	))...)
	m = append(m, section(11, vec(append(append([]byte{0x00}, append(i32c(16), 0x0b)...), name(key)...)))...)
	return m
}

// nativeRuntime runs rules written in Go in this package: a file "*.native"
// holds the rule's tag. The rule is the Go counterpart of the bench rules of
// the other runtimes: it watches native/in and native/trigger, copies
// native/in to native/out (GET then SET) and writes "<tag>:<value>" to
// native/tagged. Its Handle runs under the call deadline like a sandboxed
// rule's. It is the baseline of what the host itself costs.
type nativeRuntime struct{}

func (nativeRuntime) Kind() string { return "native" }

func (nativeRuntime) Compile(_ context.Context, name string, src []byte) (abi.Program, error) {
	tag := strings.TrimSpace(string(src))
	if tag == "" {
		return nil, &abi.CompileError{File: name, Line: 1, Msg: "empty tag"}
	}
	return nativeProgram{tag: tag}, nil
}

func (nativeRuntime) Close(context.Context) error { return nil }

type nativeProgram struct{ tag string }

func (p nativeProgram) Start(ctx context.Context, h abi.Host, lim abi.Limits) (abi.Script, error) {
	for _, k := range []string{"native/in", "native/trigger"} {
		if err := h.Watch(ctx, k, abi.WatchOptions{}); err != nil {
			return nil, err
		}
	}
	return &nativeScript{tag: p.tag, h: h, lim: lim.WithDefaults()}, nil
}

type nativeScript struct {
	tag string
	h   abi.Host
	lim abi.Limits
}

func (s *nativeScript) Handle(ctx context.Context, ev abi.Event) error {
	ctx, cancel := context.WithTimeout(ctx, s.lim.CallTimeout)
	defer cancel()
	switch ev.Key {
	case "native/in":
		v, err := s.h.Get(ctx, "native/in")
		if err != nil {
			return err
		}
		_, err = s.h.Set(ctx, "native/out", v.Data, abi.SetOptions{})
		return err
	case "native/trigger":
		_, err := s.h.Set(ctx, "native/tagged", append([]byte(s.tag+":"), ev.Value...), abi.SetOptions{})
		return err
	case "noop":
		return nil
	}
	return fmt.Errorf("native rule: unknown event key %q", ev.Key)
}

func (s *nativeScript) Close(context.Context) error { return nil }

// newLogger returns a logger of warnings and errors to tb.Log.
func newLogger(tb testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testutil.LogWriter(tb), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

var clientSeq atomic.Int64

// dial connects a store client to addr, closed when the test ends.
func dial(tb testing.TB, addr, name string, log *slog.Logger, mod ...func(*protocol.Config)) *protocol.Client {
	tb.Helper()
	cfg := protocol.Config{
		Servers:  []string{addr},
		ClientID: fmt.Sprintf("bench-%s-%d", name, clientSeq.Add(1)),
		Timeout:  10 * time.Second,
		Logger:   log,
	}
	for _, m := range mod {
		m(&cfg)
	}
	return protocoltest.Connect(tb, cfg)
}

// onNotify calls f with each notification c receives, one at a time, on a
// goroutine that ends, and is waited for, when the test ends (before c
// closes); f's context ends then too.
func onNotify(tb testing.TB, c *protocol.Client, f func(ctx context.Context, ev protocol.Event)) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-c.Events():
				if !ok {
					return
				}
				if ev.Kind == protocol.EventNotify {
					f(ctx, ev)
				}
			}
		}
	}()
	tb.Cleanup(func() { cancel(); <-done })
}

// env is an embedded broker, a host with every runtime on its own client, a
// rules folder and a user client.
type env struct {
	tb     testing.TB
	log    *slog.Logger
	broker *broker.Broker
	addr   string
	user   *protocol.Client
	hostC  *protocol.Client // the host's client
	host   *host.Host
	dir    string
	wasm   *wasm.Runtime
	plugin *plugin.Runtime
}

// sharedWasmCache is the WebAssembly compilation cache directory shared by
// the runtimes of this test binary, so that a guest compiles once (a cold
// compile of a Go guest takes seconds, and ten times that under -race).
func sharedWasmCache(tb testing.TB) string {
	tb.Helper()
	dir, err := testDir.Path()
	if err != nil {
		tb.Fatal(err)
	}
	return filepath.Join(dir, "wasm-cache")
}

// newEnv starts an env whose rules get the settings defaults, on the shared
// WebAssembly compilation cache; mods, if any, change the host's
// configuration before it starts.
func newEnv(tb testing.TB, defaults host.RuleConfig, mods ...func(*host.Config)) *env {
	tb.Helper()
	return newEnvCache(tb, defaults, sharedWasmCache(tb), mods...)
}

// newEnvCache is newEnv with the WebAssembly compilation cache in wasmCache.
func newEnvCache(tb testing.TB, defaults host.RuleConfig, wasmCache string, mods ...func(*host.Config)) *env {
	tb.Helper()
	return newEnvLink(tb, defaults, wasmCache, 0, mods...)
}

// newEnvLink is newEnvCache with every client's connection to the broker
// (the host's, the user's, and those dialed to e.addr) through a link that
// holds each byte for link each way (testnet.Proxy; none when 0).
func newEnvLink(tb testing.TB, defaults host.RuleConfig, wasmCache string, link time.Duration, mods ...func(*host.Config)) *env {
	tb.Helper()
	log := newLogger(tb)
	b := brokertest.Start(tb, func(c *broker.Config) { c.Logger = log })
	e := &env{tb: tb, log: log, broker: b, addr: b.Addr(), dir: tb.TempDir()}
	if link > 0 {
		p := testnet.NewProxy(tb, b.Addr())
		p.Delay(link)
		e.addr = p.Addr()
	}
	e.user = dial(tb, e.addr, "user", log)
	e.hostC = dial(tb, e.addr, "host", log)
	var err error
	if e.wasm, err = wasm.New(wasm.Config{CacheDir: wasmCache, Logger: log}); err != nil {
		tb.Fatal(err)
	}
	if e.plugin, err = plugin.New(plugin.Config{Logger: log}); err != nil {
		tb.Fatal(err)
	}
	luaRT := lua.New(lua.Config{})
	tb.Cleanup(func() { // after the host's Close
		ctx := context.Background()
		for _, rt := range []abi.Runtime{luaRT, e.wasm, e.plugin} {
			if err := rt.Close(ctx); err != nil {
				tb.Errorf("close %s runtime: %v", rt.Kind(), err)
			}
		}
	})
	cfg := host.Config{
		Store:    e.hostC,
		Runtimes: []abi.Runtime{nativeRuntime{}, luaRT, e.wasm, e.plugin},
		Logger:   log,
		Defaults: defaults,
	}
	for _, m := range mods {
		m(&cfg)
	}
	e.host, err = host.New(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	testutil.CloseAtEnd(tb, "host", e.host.Close)
	return e
}

// write puts a rule file into the rules folder and returns its path;
// executable files are plugins.
func (e *env) write(name string, src []byte, executable bool) string {
	e.tb.Helper()
	mode := os.FileMode(0o644)
	if executable {
		mode = 0o755
	}
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, src, mode); err != nil {
		e.tb.Fatal(err)
	}
	return p
}

// load writes a rule file and loads it.
func (e *env) load(name string, src []byte, executable bool) string {
	e.tb.Helper()
	p := e.write(name, src, executable)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.host.Load(ctx, p); err != nil {
		e.tb.Fatalf("load %s: %v", name, err)
	}
	return p
}

// readFile returns the content of path.
func readFile(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// status returns the status of the rule loaded from path.
func (e *env) status(path string) host.RuleStatus {
	e.tb.Helper()
	for _, s := range e.host.Status() {
		if s.Path == path {
			return s
		}
	}
	e.tb.Fatalf("rule %s not loaded", path)
	return host.RuleStatus{}
}

// checkClean fails the test if a rule dropped or failed an event, or a
// client dropped notifications.
func (e *env) checkClean() {
	e.tb.Helper()
	for _, s := range e.host.Status() {
		if s.Dropped != 0 || s.Failed != 0 || s.Disabled {
			e.tb.Errorf("rule %s: %d dropped, %d failed, disabled %t", filepath.Base(s.Path), s.Dropped, s.Failed, s.Disabled)
		}
	}
	if st := e.hostC.Stats(); st.EventsDropped != 0 || st.NotificationsDropped != 0 {
		e.tb.Errorf("host client dropped %d events and %d notifications", st.EventsDropped, st.NotificationsDropped)
	}
}

func (e *env) set(key, value string) {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.user.Set(ctx, []byte(key), []byte(value), protocol.SetOptions{}); err != nil {
		e.tb.Fatalf("set %s: %v", key, err)
	}
}

func (e *env) get(key string) (string, bool) {
	e.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.user.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		e.tb.Fatalf("get %s: %v", key, err)
	}
	return string(res.Value), res.Found
}
