package wasm

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/sys"

	"github.com/ssrun/ssrun/abi"
)

// program is a compiled, checked rule.
type program struct {
	r    *Runtime
	code *code
	name string
}

// maxPages is the most memory a guest gets: one page short of wasm32's
// 4 GiB, since wazero's api.Memory measures a memory in a uint32 of bytes
// (a 4 GiB memory's Size is 0, which would make every host call's
// arguments look out of range, and the memory never at its limit).
const maxPages = 1<<16 - 1

// memoryPages converts a memory limit to whole wasm pages, at most
// maxPages.
func memoryPages(bytes int64) (uint32, error) {
	pages := bytes / pageSize
	if pages < 1 {
		return 0, fmt.Errorf("memory limit %d bytes is below one 64 KiB page", bytes)
	}
	return uint32(min(pages, maxPages)), nil
}

// Start implements abi.Program: it instantiates the rule bound to h and
// runs its initialisation under lim.
func (p *program) Start(ctx context.Context, h abi.Host, lim abi.Limits) (abi.Script, error) {
	if err := p.r.enter(); err != nil {
		return nil, fmt.Errorf("%s: start: %w", p.name, err)
	}
	defer p.r.leave()
	lim = lim.WithDefaults()
	pages, err := memoryPages(lim.MemoryBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: start: %w", p.name, err)
	}
	e, err := p.r.engine(ctx, pages)
	if err != nil {
		return nil, fmt.Errorf("%s: start: %w", p.name, err)
	}
	cm, err := p.r.compiled(ctx, p.code, e)
	if err != nil {
		return nil, fmt.Errorf("%s: start with memory limit %d bytes: %w", p.name, lim.MemoryBytes, err)
	}
	s := &script{p: p, e: e, cm: cm, host: h, lim: lim}
	s.stdout = &lineWriter{emit: func(line string) { h.Log(abi.LevelInfo, line) }}
	s.stderr = &lineWriter{emit: func(line string) { h.Log(abi.LevelWarn, line) }}
	s.cfg = moduleConfig(p.name, s.stdout, s.stderr)
	if err := p.r.track(&s.guard); err != nil {
		return nil, fmt.Errorf("%s: start: %w", p.name, err)
	}
	if err := s.start(ctx); err != nil {
		p.r.untrack(&s.guard)
		return nil, fmt.Errorf("%s: start: %w", p.name, err)
	}
	return s, nil
}

// moduleConfig is the sandbox of an instance (see the package doc), but
// its sleep: instantiate adds each instance's sleeper.
func moduleConfig(name string, stdout, stderr *lineWriter) wazero.ModuleConfig {
	return wazero.NewModuleConfig().
		WithName(""). // anonymous: any number of instances per Runtime
		WithStartFunctions().
		WithArgs(name).
		WithSysWalltime().
		WithSysNanotime().
		WithRandSource(rand.Reader).
		WithStdout(stdout).
		WithStderr(stderr)
}

// instance is one instantiation of a rule module.
type instance struct {
	mod            api.Module
	alloc, onEvent api.Function
	stack          []uint64
	// coalesced: the guest exports abi.ExportCoalesced, so its event
	// records may carry Event.Coalesced.
	coalesced bool
	sleep     *sleeper

	// interrupt is the module's interrupt flag (see instrument): set, the
	// guest traps within tickEvery loop iterations and calls. raise sets
	// it and marks raised done; call arms it on each call's context.
	interrupt api.MutableGlobal
	raise     func()
	raised    sync.WaitGroup
}

// call calls fn of the instance under ctx, the call's context (from
// guard.begin), which also bounds the guest's sleeps. When ctx ends during
// the call, the interrupt flag stops the guest, and the call fails with
// the *sys.ExitError wazero's WithCloseOnContextDone would give (see
// exitError; classify maps it). A call that returns before it sees the
// flag succeeds, and the flag is cleared.
func (in *instance) call(ctx context.Context, fn api.Function, stack []uint64) error {
	in.sleep.ctx = ctx
	in.raised.Add(1)
	stop := context.AfterFunc(ctx, in.raise)
	err := fn.CallWithStack(ctx, stack)
	if stop() {
		in.raised.Done()
	} else {
		in.raised.Wait() // raise is running or ran: let it finish first
	}
	in.sleep.ctx = nil
	if in.interrupt.Get() == 0 {
		return err
	}
	if err == nil {
		in.interrupt.Set(0)
		return nil
	}
	return fmt.Errorf("interrupted (%v): %w", firstLine(err.Error()), exitError(ctx.Err()))
}

// atLimit reports whether the instance's memory reached the engine's limit.
func (in *instance) atLimit(e *engine) bool {
	if in == nil || in.mod == nil || in.mod.Memory() == nil {
		return false
	}
	return uint64(in.mod.Memory().Size()) >= uint64(e.pages)*pageSize
}

// instantiate creates an instance of cm whose host calls work on c, and runs
// the module's start function (startExport: instrument moved it out of the
// instantiation, where no flag could stop it) and then _initialize, each
// under timeout, stopped by g. On an initialisation error it returns the
// (already discarded) instance too, for classification.
func (r *Runtime) instantiate(ctx context.Context, e *engine, cm wazero.CompiledModule, cfg wazero.ModuleConfig, c *caller, g *guard, timeout time.Duration) (*instance, error) {
	sl := &sleeper{}
	mod, err := e.rt.InstantiateModule(ctx, cm, cfg.WithNanosleep(sl.nanosleep))
	if err != nil {
		return nil, err
	}
	flag, ok := mod.ExportedGlobal(interruptExport).(api.MutableGlobal)
	if !ok { // instrument adds it to every module
		_ = mod.Close(context.Background())
		return nil, fmt.Errorf("wasm: the module has no mutable global %q", interruptExport)
	}
	in := &instance{
		mod:       mod,
		alloc:     mod.ExportedFunction(abi.ExportAlloc),
		onEvent:   mod.ExportedFunction(abi.ExportOnEvent),
		coalesced: mod.ExportedFunction(abi.ExportCoalesced) != nil,
		stack:     make([]uint64, 2),
		sleep:     sl,
		interrupt: flag,
	}
	in.raise = func() {
		flag.Set(1)
		in.raised.Done()
	}
	// Register before the start function and _initialize: the rule calls
	// watch from there.
	r.callers.Store(mod, c)
	for _, name := range []string{startExport, exportInitialize} {
		fn := mod.ExportedFunction(name)
		if fn == nil {
			continue
		}
		callCtx, cancel, err := g.begin(ctx, timeout)
		if err == nil {
			err = in.call(callCtx, fn, nil)
			g.end(cancel)
		}
		if err != nil {
			r.discard(in)
			return in, err
		}
	}
	return in, nil
}

// discard closes an instance and forgets its caller state.
func (r *Runtime) discard(in *instance) {
	r.callers.Delete(in.mod)
	_ = in.mod.Close(context.Background())
}

// classify maps the error of a call into a guest to the abi failure it
// wraps: ErrTimeout, ErrMemory (when oom), ErrCrashed, or the context's
// cancellation.
func classify(err error, oom bool, timeout time.Duration) error {
	var exit *sys.ExitError
	if errors.As(err, &exit) {
		switch exit.ExitCode() {
		case sys.ExitCodeDeadlineExceeded:
			return fmt.Errorf("%w (limit %v)", abi.ErrTimeout, timeout)
		case sys.ExitCodeContextCanceled:
			return fmt.Errorf("call canceled: %w", context.Canceled)
		}
	}
	if oom {
		return fmt.Errorf("%w: %s", abi.ErrMemory, firstLine(err.Error()))
	}
	if exit != nil {
		return fmt.Errorf("%w: the rule exited with code %d", abi.ErrCrashed, exit.ExitCode())
	}
	return fmt.Errorf("%w: %s", abi.ErrCrashed, firstLine(err.Error()))
}

// firstLine drops wazero's wasm stack trace from an error message.
func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

// script is a running rule: one instance, one call at a time. Close stops
// the call in progress through guard and leaves the instance to it.
type script struct {
	p     *program
	e     *engine
	cm    wazero.CompiledModule
	host  abi.Host
	lim   abi.Limits
	cfg   wazero.ModuleConfig
	guard guard

	closeOnce sync.Once

	// run is held by Handle throughout. The fields below belong to the
	// Handle in progress (guard.acquire to guard.release), else to Close.
	run            sync.Mutex
	in             *instance // nil after a failure until the next event
	stdout, stderr *lineWriter
	rec            []byte // event record buffer
}

// start instantiates a fresh instance. Call it in a Handle (or before the
// script is shared).
func (s *script) start(ctx context.Context) error {
	s.stderr.sawOOM = false
	in, err := s.p.r.instantiate(ctx, s.e, s.cm, s.cfg, &caller{host: s.host}, &s.guard, s.lim.CallTimeout)
	s.stdout.Flush()
	s.stderr.Flush()
	if err != nil {
		return fmt.Errorf("initialisation: %w", s.failed(in, err))
	}
	s.in = in
	return nil
}

// failed classifies a failed call of in and logs wazero's full error. A
// call stopped by Close failed with ErrClosed.
func (s *script) failed(in *instance, err error) error {
	s.p.r.log.Debug("wasm: instance failed and was discarded", "rule", s.p.name, "err", err)
	if s.guard.isStopped() {
		return ErrClosed
	}
	return classify(err, s.stderr.sawOOM || in.atLimit(s.e), s.lim.CallTimeout)
}

// Handle implements abi.Script.
func (s *script) Handle(ctx context.Context, ev abi.Event) error {
	s.run.Lock()
	defer s.run.Unlock()
	if err := s.handle(ctx, ev); err != nil {
		return fmt.Errorf("%s: %s %q: %w", s.p.name, ev.Op, ev.Key, err)
	}
	return nil
}

func (s *script) handle(ctx context.Context, ev abi.Event) error {
	if err := s.p.r.enter(); err != nil {
		return err
	}
	defer s.p.r.leave()
	if err := s.guard.acquire(); err != nil {
		return err
	}
	defer s.release()
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.in == nil {
		if err := s.start(ctx); err != nil {
			return fmt.Errorf("restart after a failure: %w", err)
		}
	}
	err := s.deliver(ctx, ev)
	s.stdout.Flush()
	s.stderr.Flush()
	if cap(s.rec) > 1<<20 {
		s.rec = nil // don't keep a huge event's buffer
	}
	return err
}

// release ends a Handle; if Close was called meanwhile, it discards the
// instance Close left to it.
func (s *script) release() {
	if s.guard.release() && s.in != nil {
		s.p.r.discard(s.in)
		s.in = nil
	}
}

// deliver hands ev to the instance: ssrun_alloc, write, ssrun_on_event.
// A failed call discards the instance.
func (s *script) deliver(ctx context.Context, ev abi.Event) error {
	in := s.in
	if !in.coalesced {
		ev.Coalesced = 0 // a guest built before it cannot decode the flag
	}
	s.rec = abi.AppendEvent(s.rec[:0], ev)
	if len(s.rec) > math.MaxInt32 {
		return fmt.Errorf("%w: event record of %d bytes exceeds the 2 GiB ABI limit", abi.ErrCrashed, len(s.rec))
	}
	ctx, cancel, err := s.guard.begin(ctx, s.lim.CallTimeout)
	if err != nil {
		return err
	}
	defer s.guard.end(cancel)
	s.stderr.sawOOM = false
	in.stack[0] = api.EncodeI32(int32(len(s.rec)))
	if err := in.call(ctx, in.alloc, in.stack); err != nil {
		return s.drop(err)
	}
	ptr := api.DecodeU32(in.stack[0])
	if ptr == 0 || !in.mod.Memory().Write(ptr, s.rec) {
		s.drop(nil)
		return fmt.Errorf("%w: %s(%d) returned %#x, not a buffer in guest memory", abi.ErrCrashed, abi.ExportAlloc, len(s.rec), ptr)
	}
	in.stack[0], in.stack[1] = api.EncodeU32(ptr), api.EncodeI32(int32(len(s.rec)))
	if err := in.call(ctx, in.onEvent, in.stack); err != nil {
		return s.drop(err)
	}
	if rc := api.DecodeI32(in.stack[0]); rc != 0 {
		if rc > 0 && int(rc) < len(abi.Statuses()) {
			return fmt.Errorf("%w: status %s (the rule's log has its message)", abi.ErrCrashed, abi.Status(rc))
		}
		return fmt.Errorf("%w: returned %d (the rule's log has its message)", abi.ErrCrashed, rc)
	}
	return nil
}

// drop discards the current instance after a failed call and classifies err.
func (s *script) drop(err error) error {
	in := s.in
	s.in = nil
	s.p.r.discard(in)
	if err == nil {
		return nil
	}
	return s.failed(in, err)
}

// Close implements abi.Script. It never waits for the guest: a call in
// progress is stopped (its Handle fails with ErrClosed) and discards the
// instance when it returns.
func (s *script) Close(context.Context) error {
	s.closeOnce.Do(func() {
		busy := s.guard.stop()
		s.p.r.untrack(&s.guard)
		if busy {
			return
		}
		if s.in != nil {
			s.p.r.discard(s.in)
			s.in = nil
		}
		s.stdout.Flush()
		s.stderr.Flush()
	})
	return nil
}
