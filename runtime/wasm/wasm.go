// Package wasm runs ssrun rules compiled to WebAssembly, on wazero. It
// implements abi.Runtime and the binary contract of abi/doc.go ("WebAssembly
// binary contract"); abi/guest/go is the matching guest SDK for Go.
//
// Compilation. Compiled code is cached in memory by content hash and on disk
// (Config.CacheDir), so a rule compiles once per wazero version and CPU.
// Each distinct memory limit gets its own wazero Runtime (the page limit is a
// Runtime setting); all of them share one compilation cache, and a module
// is compiled into each Runtime at most once, never on every Start. A
// binary no rule uses any more stays compiled and checked for a while
// (Config.Keep), so a version seen before (a rollback, a file saved back)
// loads again without compiling or checking.
//
// Load checks. Compile rejects, with an *abi.CompileError, a module that is
// not valid WebAssembly, imports a function that is not exactly an ABI v1
// host function or a WASI preview 1 function, imports from any other module
// or imports its memory, lacks the "memory", ssrun_abi_version, ssrun_alloc
// or ssrun_on_event exports or has them with other signatures, or is a WASI
// command instead of a reactor. It then instantiates the module once as a
// check: _initialize runs under the default limits with a host on which
// watch, unwatch and log succeed and the store verbs fail with
// UNAVAILABLE, and ssrun_abi_version must return abi.Version. A module
// whose initialisation fails there (trap, panic, exit, deadline) is
// rejected too. The check instance is then discarded; Start runs the
// initialisation again against the rule's real Host. A Compile of bytes
// whose check another Compile is running waits for that verdict only as
// long as its own context lasts.
//
// Instances. A Script owns one instance and runs one call at a time. Each
// call (initialisation, event) runs under abi.Limits.CallTimeout and the
// caller's context, and nothing a guest can reach outlives them: a call
// is stopped even in a tight loop or a loop-free recursion (the module is
// compiled with an interrupt check at every loop header and at the entry
// of every function that calls, see instrument; a module that cannot be
// instrumented is refused), a
// WASI sleep (poll_oneoff on a clock: what time.Sleep and every language's
// sleep compile to) ends with the call (see sleeper), stdin is empty, the
// threads proposal (memory.atomic.wait) is not enabled, and the host verbs
// get the call's context. A call stopped at its deadline fails with
// abi.ErrTimeout, one whose context was canceled with that context's error.
// After a deadline, a cancellation, a trap (including ABI misuse such as an
// out-of-range pointer), a guest exit or running out of memory, the Script
// discards the instance and starts a fresh one (running _initialize again)
// before its next event. Errors wrap abi.ErrTimeout, abi.ErrMemory or
// abi.ErrCrashed. A guest that cannot grow its memory is reported as
// abi.ErrMemory when its stderr says it ran out of memory (Go's runtime
// prints "fatal error: out of memory") or its memory reached the limit;
// other guests that give up on a failed memory.grow show as
// abi.ErrCrashed.
//
// Closing. Script.Close and Runtime.Close never wait for a guest: they stop
// the call in progress, which fails with ErrClosed, and the instance is
// discarded as it returns; the wazero runtimes are closed once no call is
// left.
//
// Sandbox. Guests get WASI preview 1 with the real wall and monotonic
// clocks, real sleep (ended with the call), crypto/rand randomness, argv =
// [rule name], an empty stdin, no environment and no filesystem. Their
// stdout and stderr reach Host.Log line by line at info and warn level (a
// partial line is flushed when the call ends; lines longer than 16 KiB are
// split).
package wasm

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/ssrun/ssrun/abi"
)

// Config configure a Runtime. The zero value is the documented default.
type Config struct {
	// CacheDir keeps compiled code across runs (in a subdirectory per
	// wazero version, CPU and OS). Default: os.UserCacheDir()/ssrun/wasm;
	// if that is not available the cache lives in memory only.
	CacheDir string
	// Logger receives the runtime's own diagnostics at debug level:
	// compilations, output of load checks, replaced instances. Default
	// slog.Default().
	Logger *slog.Logger
	// Keep is how many module binaries no rule uses any more stay compiled
	// in memory with their load-check verdict (the most recently released),
	// so that one seen before loads again at once. Default DefaultKeep;
	// negative: none.
	Keep int
}

// ErrClosed is returned by calls on a closed Runtime or Script.
var ErrClosed = errors.New("wasm: closed")

// pageSize is the WebAssembly page size.
const pageSize = 64 << 10

// Runtime is the WebAssembly abi.Runtime. Create it with New.
type Runtime struct {
	log   *slog.Logger
	cache wazero.CompilationCache

	mu      sync.Mutex
	engines map[uint32]*engine // by memory limit in pages
	seed    maphash.Seed
	codes   map[uint64]*code    // by content hash: in use, and kept (idle)
	idle    []*code             // kept: no Program uses them; oldest first
	keep    int                 // Config.Keep
	guards  map[*guard]struct{} // of live scripts and load checks

	// closed is set by Close. active counts the operations running wazero
	// (Compile, Start, Handle); the engines are closed once Close was
	// called and none is left, by whichever comes last.
	closed     atomic.Bool
	active     atomic.Int64
	closeOnce  sync.Once
	closeError error

	// callers maps each live instance (api.Module) to its *caller, for the
	// host functions.
	callers sync.Map

	// compiles counts wazero CompileModule calls (tests check that Start
	// does not compile).
	compiles atomic.Int64
}

var _ abi.Runtime = (*Runtime)(nil)

// New returns a Runtime. It fails only if an explicit Config.CacheDir
// cannot be created.
func New(opts Config) (*Runtime, error) {
	r := &Runtime{
		log:     opts.Logger,
		engines: map[uint32]*engine{},
		seed:    maphash.MakeSeed(),
		codes:   map[uint64]*code{},
		guards:  map[*guard]struct{}{},
		keep:    max(opts.Keep, 0),
	}
	if opts.Keep == 0 {
		r.keep = DefaultKeep
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	dir := opts.CacheDir
	if dir == "" {
		base, err := os.UserCacheDir()
		if err == nil {
			dir = filepath.Join(base, "ssrun", "wasm")
			r.cache, err = wazero.NewCompilationCacheWithDir(dir)
		}
		if err != nil {
			r.log.Warn("wasm: no on-disk compilation cache; compiled code is kept in memory only", "err", err)
			r.cache = wazero.NewCompilationCache()
		}
		return r, nil
	}
	cache, err := wazero.NewCompilationCacheWithDir(dir)
	if err != nil {
		return nil, fmt.Errorf("wasm: compilation cache %s: %w", dir, err)
	}
	r.cache = cache
	return r, nil
}

// Kind implements abi.Runtime.
func (r *Runtime) Kind() string { return "wasm" }

// Close implements abi.Runtime. It stops every guest call in progress
// (they fail with ErrClosed) and returns without waiting for them: the
// wazero runtimes are closed at once when no call is left, else by the
// last one to return (an error closing them is then logged).
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed.Swap(true) {
		r.mu.Unlock()
		return nil
	}
	for g := range r.guards {
		g.stop()
	}
	r.mu.Unlock()
	if r.active.Load() == 0 {
		return r.closeEngines(ctx)
	}
	return nil
}

// closeEngines closes the wazero runtimes and the compilation cache, once.
func (r *Runtime) closeEngines(ctx context.Context) error {
	r.closeOnce.Do(func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		var errs []error
		for _, e := range r.engines {
			errs = append(errs, e.rt.Close(ctx))
		}
		errs = append(errs, r.cache.Close(ctx))
		r.closeError = errors.Join(errs...)
	})
	return r.closeError
}

// enter registers an operation that runs wazero; leave must follow. It
// fails with ErrClosed once the Runtime is closed.
func (r *Runtime) enter() error {
	r.active.Add(1)
	if r.closed.Load() {
		r.leave()
		return ErrClosed
	}
	return nil
}

// leave ends an operation; the last one after Close closes the engines.
func (r *Runtime) leave() {
	if r.active.Add(-1) == 0 && r.closed.Load() {
		if err := r.closeEngines(context.Background()); err != nil {
			r.log.Warn("wasm: closing the runtime", "err", err)
		}
	}
}

// track registers g, for Close to stop; untrack forgets it. It fails with
// ErrClosed once the Runtime is closed.
func (r *Runtime) track(g *guard) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return ErrClosed
	}
	r.guards[g] = struct{}{}
	return nil
}

func (r *Runtime) untrack(g *guard) {
	r.mu.Lock()
	delete(r.guards, g)
	r.mu.Unlock()
}

// engine is one wazero Runtime: a memory limit with its own WASI and ssrun
// host modules.
type engine struct {
	pages uint32
	rt    wazero.Runtime
	// wasi maps each WASI preview 1 function to its signature.
	wasi map[string]string
}

// engine returns the wazero Runtime for a memory limit of pages.
func (r *Runtime) engine(ctx context.Context, pages uint32) (*engine, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	if e := r.engines[pages]; e != nil {
		return e, nil
	}
	cfg := wazero.NewRuntimeConfig().
		WithCompilationCache(r.cache).
		WithCloseOnContextDone(false). // instrument's flag stops a call instead
		WithMemoryLimitPages(pages)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiate WASI: %w", err)
	}
	if err := instantiateHostModule(ctx, rt, r.callerOf); err != nil {
		_ = rt.Close(ctx)
		return nil, fmt.Errorf("wasm: instantiate host module: %w", err)
	}
	e := &engine{pages: pages, rt: rt, wasi: map[string]string{}}
	for name, def := range rt.Module(wasi_snapshot_preview1.ModuleName).ExportedFunctionDefinitions() {
		e.wasi[name] = signature(def.ParamTypes(), def.ResultTypes())
	}
	r.engines[pages] = e
	return e, nil
}

// callerOf returns the state of the instance mod (a host function's caller).
func (r *Runtime) callerOf(mod api.Module) *caller {
	c, ok := r.callers.Load(mod)
	if !ok {
		panic(fmt.Errorf("ssrun host function called by unknown module %s", mod))
	}
	return c.(*caller)
}

// code is one distinct module binary and its compiled forms. Programs with
// the same content share it; the last one to be garbage collected closes
// its compiled modules (abi.Program has no Close).
type code struct {
	hash uint64 // maphash of src under Runtime.seed
	src  []byte
	refs int // live programs; guarded by Runtime.mu

	// sem is the lock of the fields below, a channel so that a caller
	// waiting while another compiles or runs the load check can give up
	// when its context ends.
	sem     chan struct{}
	checked bool   // the load checks ran to a verdict
	problem string // their verdict; "" = loadable
	mods    map[*engine]wazero.CompiledModule
}

// lock locks c, or fails when ctx ends first.
func (c *code) lock(ctx context.Context) error {
	select {
	case c.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (c *code) unlock() { <-c.sem }

// acquire returns the code for src, counting one more program using it.
// The content is found by a fast hash (maphash; a cryptographic one costs
// 2 ms on a 2.8 MB Go guest) and compared in full: on a collision, src gets
// a code of its own, shared by none and closed with its program.
func (r *Runtime) acquire(src []byte) (*code, error) {
	h := maphash.Bytes(r.seed, src)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed.Load() {
		return nil, ErrClosed
	}
	c := r.codes[h]
	if c == nil || !bytes.Equal(c.src, src) {
		fresh := &code{hash: h, src: append([]byte(nil), src...), sem: make(chan struct{}, 1), mods: map[*engine]wazero.CompiledModule{}}
		if c == nil {
			r.codes[h] = fresh
		}
		c = fresh
	}
	r.reuseLocked(c)
	c.refs++
	return c, nil
}

// release drops one program's use of c; after the last, c is kept (see
// keep.go), and the kept code it pushes out is closed.
func (r *Runtime) release(c *code) {
	r.mu.Lock()
	c.refs--
	var drop []*code
	switch {
	case c.refs > 0:
	case r.codes[c.hash] == c:
		drop = r.idleLocked(c)
	default: // a collision's code of its own
		drop = []*code{c}
	}
	r.mu.Unlock()
	for _, old := range drop {
		r.closeCode(old)
	}
}

// compiled returns c compiled for e, compiling it on first use.
func (r *Runtime) compiled(ctx context.Context, c *code, e *engine) (wazero.CompiledModule, error) {
	if err := c.lock(ctx); err != nil {
		return nil, err
	}
	defer c.unlock()
	return r.compiledLocked(ctx, c, e)
}

func (r *Runtime) compiledLocked(ctx context.Context, c *code, e *engine) (wazero.CompiledModule, error) {
	if cm := c.mods[e]; cm != nil {
		return cm, nil
	}
	r.compiles.Add(1)
	ctx = experimental.WithCompilationWorkers(ctx, min(runtime.GOMAXPROCS(0), 4))
	bin, err := instrument(mergeData(c.src)) // fewer data segments: a faster instantiation
	if err != nil {
		return nil, fmt.Errorf("cannot add the interrupt checks: %w", err)
	}
	cm, err := e.rt.CompileModule(ctx, bin)
	if err != nil {
		return nil, err
	}
	c.mods[e] = cm
	return cm, nil
}

// Compile implements abi.Runtime: it compiles src (or finds it compiled)
// and runs the load checks described in the package documentation.
func (r *Runtime) Compile(ctx context.Context, name string, src []byte) (abi.Program, error) {
	if err := r.enter(); err != nil {
		return nil, fmt.Errorf("%s: compile: %w", name, err)
	}
	defer r.leave()
	c, err := r.acquire(src)
	if err != nil {
		return nil, fmt.Errorf("%s: compile: %w", name, err)
	}
	if err := r.load(ctx, c, name); err != nil {
		r.release(c)
		return nil, err
	}
	p := &program{r: r, code: c, name: name}
	runtime.AddCleanup(p, r.release, c)
	return p, nil
}

// load compiles c into the default-limit engine and runs the load checks
// once per content. A verdict is remembered unless ctx ended or the Runtime
// closed meanwhile.
func (r *Runtime) load(ctx context.Context, c *code, name string) error {
	if err := c.lock(ctx); err != nil {
		return fmt.Errorf("%s: compile: %w", name, err)
	}
	defer c.unlock()
	if !c.checked {
		e, err := r.engine(ctx, abi.DefaultMemoryBytes/pageSize)
		if err != nil {
			return fmt.Errorf("%s: compile: %w", name, err)
		}
		problem := ""
		if cm, err := r.compiledLocked(ctx, c, e); err != nil {
			problem = "invalid module: " + err.Error()
		} else if problem = checkModule(cm, e); problem == "" {
			problem = r.probe(ctx, name, e, cm)
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: compile: %w", name, err)
		}
		if r.closed.Load() {
			return fmt.Errorf("%s: compile: %w", name, ErrClosed)
		}
		c.checked, c.problem = true, problem
		r.log.Debug("wasm: compiled", "rule", name, "bytes", len(c.src), "problem", problem)
	}
	if c.problem != "" {
		return &abi.CompileError{File: name, Msg: c.problem}
	}
	return nil
}
