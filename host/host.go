package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/abandon"
	"github.com/ssrun/ssrun/host/internal/contenthash"
	"github.com/ssrun/ssrun/host/internal/gate"
	"github.com/ssrun/ssrun/host/internal/group"
	"github.com/ssrun/ssrun/host/internal/lineage"
	"github.com/ssrun/ssrun/host/internal/loadretry"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/observe"
	"github.com/ssrun/ssrun/host/internal/patternwatch"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/host/internal/watch"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/host/rulefile"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/protocol"
)

// Config configure a Host. The zero value of each field is its documented
// default; Client and at least one runtime are required.
type Config struct {
	// Store is the connected (or connecting) store client: a
	// *protocol.Client over MQTT, or of a store in process (see Store).
	// The Host reads its Events stream; nothing else may.
	Store Store
	// Runtimes run rule files, chosen by extension: the runtime of kind
	// "lua" runs *.lua, "wasm" runs *.wasm, and "plugin" runs executable
	// files without an extension.
	Runtimes []abi.Runtime
	// Logger for everything the host reports; slog.Default() when nil.
	Logger *slog.Logger
	// Defaults apply to every rule; Rules override them per file name (an
	// exact name, or a path.Match glob such as "*.wasm"). When the client
	// is connected, a max_value its broker cannot carry (see
	// ValueHeadroom) is refused; one taken before is logged on connection.
	Defaults RuleConfig
	Rules    map[string]RuleConfig
	// MaxHops is the longest chain of rule writes triggering rules before
	// the feedback-loop damper drops the event (DefaultMaxHops when zero).
	MaxHops int
	// LoadTimeout bounds compiling a rule file, and starting it on top of
	// its own timeout (DefaultLoadTimeout when zero). A runtime that has not
	// returned by then plus the rule's grace is abandoned and the load
	// fails with a *StuckError.
	LoadTimeout time.Duration
	// JournalEntries and JournalBytes bound the provenance journal (see
	// Host.Why): the last write of at most this many keys, holding at most
	// about this many bytes (DefaultJournalEntries, DefaultJournalBytes when
	// zero); the least recently written keys are forgotten first.
	JournalEntries int
	JournalBytes   int
	// Observer, when set, is told the duration and result of every handler
	// call (see Observer); nil costs nothing.
	Observer Observer
	// Tracer, when set, is told what becomes of each event (see Tracer),
	// and each host call of a handler if it is a CallTracer that asks;
	// nil costs nothing.
	Tracer Tracer
	// DryRun, when set, makes the host a dry run (see dryrun.go): the
	// rules' writes, locks and unlocks are staged in memory and passed to
	// DryRun, never sent to the store, and their timers are kept in memory.
	// It is called from the rules' workers, one write at a time.
	DryRun func(staging.Write)
	// Recorder, when set, is told every event the rules handle, every
	// host call they make with its reply, and the connection going down
	// and up (see Recorder); nil costs nothing.
	Recorder Recorder
	// MaxConcurrentCalls bounds the handler calls running at once, across
	// all rules (DefaultMaxConcurrentCalls when zero; see internal/gate): an
	// event whose rule would exceed it waits in the rule's mailbox, and
	// its call's deadline starts when it gets its place.
	MaxConcurrentCalls int
	// LoadConcurrency bounds the rule files that LoadDir compiles and
	// starts at once (DefaultLoadConcurrency when zero; 1 loads them one
	// after the other).
	LoadConcurrency int
	// Group, when set, makes the host a member of a group of hosts that
	// share the rules, each rule running on one of them (see
	// host/internal/group).
	Group *GroupConfig
	// LoadRetry is the first wait before a rule file whose start failed
	// (its initialisation raised an error, ran too long, its plugin did
	// not start) while no version of it runs is loaded again
	// (DefaultLoadRetry when zero; never when negative). It doubles after
	// each failure of the same content, up to MaxLoadRetry, and every
	// reconnection to the store retries at once (see loadretry.go).
	LoadRetry time.Duration
	// Clock is the host's time (see package clock): clock.Real when nil; ssrun test
	// and replay give a clock.Virtual.
	Clock clock.Clock
	// Serial makes the host run one handler at a time, in the order their
	// events were queued across all rules, and able to tell when it is idle
	// (WaitIdle, Hold; see internal/serial): what ssrun test and replay need to be
	// deterministic. Its Store must count the events it queues (a
	// *protocol.Client does: EventsQueued).
	Serial bool

	// now is the monotonic clock that times leases (host/internal/lease); time.Now
	// when nil. Tests inject one.
	now func() time.Time
	// clock is the clock of timers (timers.go); hostClock when nil. Tests
	// inject a fake one.
	clock timers.TimeSource
}

// DefaultMaxHops bounds chains of rules triggering each other.
const DefaultMaxHops = 16

// DefaultLoadTimeout bounds compiling and starting one rule file. It is a
// backstop for a runtime that never returns, so it is far above any honest
// load: a cold compile of a Go WebAssembly guest takes 0.4 s, but over 30 s
// under the race detector on a loaded 2-core machine; a plugin may take
// 10 s to start.
const DefaultLoadTimeout = 2 * time.Minute

// DefaultLoadConcurrency is how many rule files LoadDir loads at once by
// default: 4 per core (GOMAXPROCS). Loading a rule is part CPU (compiling,
// instantiating a WebAssembly guest) and part waiting on the store (a
// KEYNOTIFY and a read per newly watched key, the rule's timers), so more
// loads than cores keep both busy.
func DefaultLoadConcurrency() int { return 4 * runtime.GOMAXPROCS(0) }

// ErrClosed is returned by loads after Close.
var ErrClosed = errors.New("host closed")

// Host runs rules. Create it with New, load rules with Load, LoadDir or
// WatchDir, and Close it.
type Host struct {
	// services: the client, logger, watch registry, damper, call tracker,
	// lease clock and lifetime that rules share (see rule.go).
	services
	runtimes    map[string]abi.Runtime // by kind
	defaults    RuleConfig
	rules       map[string]RuleConfig
	maxHops     int
	loadTimeout time.Duration
	loadConc    int

	cancel context.CancelFunc // ends ctx
	wg     sync.WaitGroup     // dispatcher and resync loop
	resync serial.Signal
	all    atomic.Bool // the next resync re-reads every key, not only owed ones

	loads        chan struct{}   // cap 1: held by Load, Remove and Close
	closing      context.Context // ended by Close: loads in progress fail
	startClosing context.CancelFunc
	closeOnce    atomic.Bool
	mu           sync.Mutex
	slots        map[string]*rule    // by path
	outcomes     *loadretry.Outcomes // files that failed to load, not in slots
	hashes       *contenthash.Memo   // SHA-256 of rule files, by content

	events, damped, resyncs, loadRetries atomic.Uint64
	lastDampLog                          atomic.Int64

	// valueLimits are the max_value settings of defaults and rules, for
	// the check against each connection's broker (warnUncarried), which
	// does not take the loads lock that guards defaults and rules.
	valueLimits atomic.Pointer[[]valueLimit]

	// group is the host's part in a group (nil: none); groupStop ends its
	// loop, which closes groupDone.
	group     *group.Group
	groupStop context.CancelFunc
	groupDone chan struct{}
}

// New validates opts and starts the host's event dispatcher.
func New(opts Config) (*Host, error) {
	if opts.Store == nil {
		return nil, errors.New("host: a store client is required")
	}
	if len(opts.Runtimes) == 0 {
		return nil, errors.New("host: at least one runtime is required")
	}
	if err := validateRuleConfigs(opts.Defaults, opts.Rules); err != nil {
		return nil, err
	}
	limits := valueLimits(opts.Defaults, opts.Rules)
	if max, ok := opts.Store.MaxPacketSize(); ok {
		if err := checkCarried(limits, max); err != nil {
			return nil, err
		}
	}
	if opts.Group != nil {
		if err := opts.Group.Validate(); err != nil {
			return nil, err
		}
		if opts.DryRun != nil {
			return nil, errors.New("host: a dry run cannot be in a group: it writes nothing, so it cannot hold leases")
		}
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	var q *serial.Quiet
	if opts.Serial {
		ec, ok := opts.Store.(eventCounter)
		if !ok {
			return nil, errors.New("host: a serial host needs a store client that counts the events it queues (EventsQueued)")
		}
		q = serial.New(ec.EventsQueued)
	}
	h := &Host{
		services: services{
			client:  opts.Store,
			log:     opts.Logger,
			clock:   opts.Clock,
			quiet:   q,
			now:     opts.now,
			calls:   abandon.NewTracker(opts.Clock),
			lin:     lineage.New(1<<16, opts.Clock),
			journal: provenance.NewJournal(opts.JournalEntries, opts.JournalBytes),
			obs:     opts.Observer,
			trace:   opts.Tracer,
			rec:     opts.Recorder,
			gate:    gate.New(opts.MaxConcurrentCalls),
		},
		runtimes:    map[string]abi.Runtime{},
		defaults:    opts.Defaults,
		rules:       opts.Rules,
		maxHops:     opts.MaxHops,
		loadTimeout: opts.LoadTimeout,
		loadConc:    opts.LoadConcurrency,
		resync:      serial.NewSignal(q),
		loads:       make(chan struct{}, 1),
		slots:       map[string]*rule{},
		hashes:      contenthash.New(),
		outcomes:    loadretry.NewOutcomes(loadretry.New(opts.LoadRetry, opts.Clock, q)),
	}
	h.services.host = h
	if h.log == nil {
		h.log = slog.Default()
	}
	if h.maxHops <= 0 {
		h.maxHops = DefaultMaxHops
	}
	if h.now == nil {
		h.now = opts.Clock.Now
	}
	if h.loadTimeout <= 0 {
		h.loadTimeout = DefaultLoadTimeout
	}
	if h.loadConc <= 0 {
		h.loadConc = DefaultLoadConcurrency()
	}
	if opts.clock == nil {
		opts.clock = timers.HostClock{Client: opts.Store, Clock: opts.Clock, Quiet: q}
	}
	h.valueLimits.Store(&limits)
	h.timers = timers.NewScheduler(opts.clock, q)
	h.kv = opts.Store
	if opts.DryRun != nil {
		dry, err := staging.NewStaging(opts.Store, opts.clock.NowMs, ReservedPrefix, h.log, opts.DryRun)
		if err != nil {
			return nil, fmt.Errorf("host: dry run: %w", err)
		}
		h.dry, h.kv = dry, dry
	}
	h.closing, h.startClosing = context.WithCancel(context.Background())
	for _, rt := range opts.Runtimes {
		h.runtimes[rt.Kind()] = rt
	}
	h.reg = watch.New(h.client, h.log)
	h.pats = patternwatch.NewHub(h.client, h.log, opts.Clock, q, ReservedPrefix)
	h.ctx, h.cancel = context.WithCancel(context.Background())
	h.wg.Add(5)
	go func() { defer h.wg.Done(); h.pats.Run(h.ctx) }()
	go h.dispatch()
	go h.resyncLoop()
	go func() { defer h.wg.Done(); h.outcomes.Retries.Run(h.ctx, h.retryLoad) }()
	go func() { defer h.wg.Done(); h.timers.Run(h.ctx) }()
	if opts.Group != nil { // its loop ends before the rules stop (Close)
		h.group = newGroup(h, *opts.Group)
		h.services.group = h.group.Ownership
		gctx, stop := context.WithCancel(h.ctx)
		h.groupStop, h.groupDone = stop, make(chan struct{})
		go func() { defer close(h.groupDone); h.group.Run(gctx) }()
	}
	return h, nil
}

// dispatch reads the client's event stream and routes notifications to the
// watching rules' mailboxes. It never blocks on a rule.
func (h *Host) dispatch() {
	defer h.wg.Done()
	var buf []watch.Watcher
	wasDown := false
	for {
		select {
		case <-h.ctx.Done():
			return
		case ev, ok := <-h.client.Events():
			if !ok {
				return
			}
			h.handleEvent(ev, &buf, &wasDown)
		}
	}
}

// handleEvent is the dispatcher's handling of one event of the store
// client's stream.
func (h *Host) handleEvent(ev protocol.Event, buf *[]watch.Watcher, wasDown *bool) {
	defer h.quiet.RoutedOne()
	switch ev.Kind {
	case protocol.EventNotify:
		*buf = h.route(ev, (*buf)[:0])
	case protocol.EventConnected:
		h.recordConnection(true)
		// After an outage every watched key is re-read; on the first
		// connection only watches registered while offline are owed.
		h.all.Store(*wasDown)
		*wasDown = false
		h.resync.Raise()
	case protocol.EventDisconnected:
		h.recordConnection(false)
		*wasDown = true
		h.log.Warn("store connection lost; watched keys are re-read when it returns", "err", ev.Err)
	}
}

func (h *Host) route(ev protocol.Event, buf []watch.Watcher) []watch.Watcher {
	h.events.Add(1)
	version := ev.Version.String()
	lin := h.lin.Lookup(string(ev.Key), version, abi.Op(ev.Op))
	if lin.Hop > h.maxHops {
		n := h.damped.Add(1)
		observe.Damped(h.trace, abi.Event{Key: string(ev.Key), Op: abi.Op(ev.Op), Version: version}, lin, h.clock)
		now := h.clock.Now().UnixNano()
		if last := h.lastDampLog.Load(); now-last > int64(time.Second) && h.lastDampLog.CompareAndSwap(last, now) {
			h.log.Warn("feedback loop between rules damped: event dropped", "key", string(ev.Key),
				"rules", provenance.Describe(lin.Steps), "hops", lin.Hop, "damped_total", n)
		}
		return buf
	}
	buf = h.reg.Notify(ev, buf)
	if len(buf) == 0 {
		return buf
	}
	e := abi.Event{Key: string(ev.Key), Op: abi.Op(ev.Op), Version: version}
	if e.Op == abi.OpSet {
		e.Value = ev.Value
	}
	if lin.Hop == 0 { // from outside the rules: the origin of any chain it starts
		lin.Origin = &provenance.Origin{Key: e.Key, Op: ev.Op, Version: version, Client: ev.Source}
	}
	for _, w := range buf {
		w.Enqueue(mailbox.Delivery{Ev: e, Lin: lin})
	}
	return buf
}

// resyncLoop re-reads watched keys after every (re)connection and delivers
// resync events for keys that changed while the host was offline.
func (h *Host) resyncLoop() {
	defer h.wg.Done()
	checked := 0 // the broker's maximum packet size warnUncarried last saw
	for {
		select {
		case <-h.ctx.Done():
			return
		case <-h.resync.C:
		}
		h.resyncOnce(&checked)
		h.resync.Took()
	}
}

// resyncOnce is one turn of resyncLoop.
func (h *Host) resyncOnce(checked *int) {
	h.warnUncarried(checked)
	h.outcomes.Retries.Now() // a start that failed while the store was away
	for _, re := range h.reg.Resync(h.ctx, h.all.Swap(false)) {
		h.resyncs.Add(1)
		d := mailbox.Delivery{Ev: re.Ev, Lin: provenance.Lineage{Origin: &provenance.Origin{Key: re.Ev.Key, Op: string(re.Ev.Op), Version: re.Ev.Version}}}
		for _, w := range re.To {
			w.Enqueue(d)
		}
	}
	h.pats.Reconnected() // keys created while offline
	h.loadTimers()
}

// warnUncarried logs each max_value setting that the broker of the current
// connection cannot carry, when its maximum packet size is not the one it
// checked last (*checked). New and SetRuleConfig refuse such a setting
// when the broker's limit is known; one taken before (the broker was not
// connected yet, or a broker with a smaller limit took over) stays, and a
// rule's writes larger than the broker carries fail with TOO_LARGE, unsent.
func (h *Host) warnUncarried(checked *int) {
	max, ok := h.client.MaxPacketSize()
	if !ok || max == *checked {
		return
	}
	*checked = max
	for _, l := range uncarried(*h.valueLimits.Load(), max) {
		h.log.Error("max_value is more than the broker can carry: larger writes fail with TOO_LARGE",
			"rule", l.entry, "max_value", l.bytes, "broker_max_packet", max, "value_fits", max-ValueHeadroom)
	}
}

// retryLoad loads again the rule file at path, whose start failed
// (loadretry.go), and logs the outcome.
func (h *Host) retryLoad(path string) {
	name := filepath.Base(path)
	err := h.Load(h.ctx, path)
	switch {
	case errors.Is(err, ErrClosed) || h.ctx.Err() != nil:
	case err != nil:
		if at := h.outcomes.Retries.At(path); !at.IsZero() {
			h.log.Warn("rule failed to start again; tried again later", "rule", name, "in", at.Sub(h.clock.Now()).Round(time.Millisecond), "err", err)
		} else {
			h.log.Error("rule failed to load again; loaded when its file changes", "rule", name, "err", err)
		}
	case h.ruleAt(path) != nil:
		h.loadRetries.Add(1)
		h.log.Info("rule started on a retry", "rule", name)
	}
}

// logNotLoaded logs the failed first load of the rule file at path, with
// when it is tried again, if it is (loadretry.go).
func (h *Host) logNotLoaded(path string, err error) {
	if at := h.outcomes.Retries.At(path); !at.IsZero() {
		h.log.Error("rule not loaded; its start is tried again", "rule", filepath.Base(path), "in", at.Sub(h.clock.Now()).Round(time.Millisecond), "err", err)
		return
	}
	h.log.Error("rule not loaded", "rule", filepath.Base(path), "err", err)
}

// ruleAt returns the rule loaded from path, or nil.
func (h *Host) ruleAt(path string) *rule {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.slots[path]
}

// loadTimers reads the timers of rules whose timers could not be read when
// they loaded (the store was offline).
func (h *Host) loadTimers() {
	for _, r := range h.loaded() {
		if err := r.timers.Load(h.ctx); err != nil && h.ctx.Err() == nil {
			h.log.Warn("rule's timers still not read from the store; tried again at its next timer call or reconnection", "rule", r.name, "err", err)
		}
	}
}

// loaded returns the loaded rules.
func (h *Host) loaded() []*rule {
	h.mu.Lock()
	defer h.mu.Unlock()
	rs := make([]*rule, 0, len(h.slots))
	for _, r := range h.slots {
		rs = append(rs, r)
	}
	return rs
}

func (h *Host) runtimeFor(path string, info os.FileInfo) (abi.Runtime, bool) {
	kind, ok := rulefile.Kind(path, info)
	if !ok {
		return nil, false
	}
	rt, ok := h.runtimes[kind]
	return rt, ok
}

// IsRule reports whether the file at path would be loaded as a rule.
func (h *Host) IsRule(path string) bool {
	info, err := os.Stat(path)
	if err != nil {
		return false
	}
	_, ok := h.runtimeFor(path, info)
	return ok
}

// Load compiles and starts the rule file at path, or replaces the running
// version of it. A file that fails to compile or start leaves the running
// version in place and returns an error naming the file (and line). An
// unchanged file is not reloaded. Compiling and starting are bounded (see
// Config.LoadTimeout), and a running version stuck in a call is replaced
// once the call is overdue (see RuleConfig.Grace).
func (h *Host) Load(ctx context.Context, path string) error {
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	defer h.unlockLoads()
	if h.group != nil && h.group.Standby(path) {
		return nil // another host of the group runs it
	}
	return h.loadLocked(ctx, path)
}

// loadLocked is Load, the loads lock held.
func (h *Host) loadLocked(ctx context.Context, path string) (err error) {
	var (
		kind  string
		hash  [32]byte
		retry bool // a failure from here on may pass: loadretry.go
	)
	defer func() {
		h.mu.Lock()
		r := h.slots[path]
		h.mu.Unlock()
		// for Status and Stats; a load cut short by Close is no failure of the file
		if err == nil || (!errors.Is(err, ErrClosed) && h.closing.Err() == nil) {
			if r != nil {
				r.loaded(err) // a loaded rule goes on with its previous version, in StateReloadFailed
			}
			h.outcomes.Note(r != nil, path, kind, hash, err, clip, retry)
		}
	}()
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("load %s: %w", path, err)
	}
	rt, ok := h.runtimeFor(path, info)
	if !ok {
		return fmt.Errorf("load %s: not a rule file (no runtime for it: want .lua, .wasm or an executable plugin)", path)
	}
	kind = rt.Kind()
	src, err := rulefile.Read(path)
	if err != nil {
		return fmt.Errorf("load: %w", err) // it names the file
	}
	hash = h.hashes.Sum(src)
	h.mu.Lock()
	r := h.slots[path]
	h.mu.Unlock()
	if r != nil && r.runs(hash) {
		if r.reloadFailed() { // the fix was to save the running version back
			h.log.Info("the file matches the running version again; its failed version is dropped", "rule", r.name, "version", shortHash(hash))
		}
		return settleCanary(ctx, r) // back to the live version: no shadow
	}
	if r != nil && shadowRuns(r, hash) {
		return nil
	}
	cfg, err := loadableConfigFor(h.defaults, h.rules, path)
	if err != nil {
		return fmt.Errorf("load %w", err)
	}
	name := filepath.Base(path)
	lctx, cancel := context.WithTimeout(ctx, h.loadTimeout+cfg.Timeout)
	defer cancel()
	defer context.AfterFunc(h.closing, cancel)()
	prog, err := abandon.Aside(h.calls, lctx, name, "compile", cfg.Grace, func(ctx context.Context) (abi.Program, error) {
		return rt.Compile(ctx, path, src)
	}, nil)
	if err != nil {
		return err // a *abi.CompileError names file and line; a *StuckError file and step
	}
	fresh := r == nil
	if fresh {
		r = newRule(&h.services, path, rt.Kind(), cfg)
		// Timers armed before (by an earlier run of the host, or another
		// host) are held until the rule is live. Without the store they are
		// read later: at the rule's first timer call, or on reconnection.
		if err := r.timers.Load(lctx); err != nil {
			h.log.Warn("rule's timers not read from the store yet", "rule", r.name, "err", err)
		}
	} else {
		r.reconfigure(cfg)
	}
	next := newInstance(hash)
	b := newBinding(r, next, h.client)
	if cfg.Concurrency > 1 {
		b.own = &callCause{} // each instance of the pool its own event (replica.go)
	}
	var shadow *canary
	canary := !fresh && cfg.Canary.on() && h.dry == nil
	if canary && r.runsPool() {
		// A shadow is judged event by event next to the live version,
		// which a pool does not run one at a time: this reload swaps.
		h.log.Warn("canary skipped: the running version has concurrency above 1; the new version is swapped in at once", "rule", r.name)
		canary = false
	}
	if canary {
		if shadow, err = newCanary(r, next, cfg.Canary); err != nil {
			return err
		}
		b.shadow = shadow
	}
	retry = true
	script, err := abandon.Aside(h.calls, lctx, name, "start", cfg.Grace, func(ctx context.Context) (abi.Script, error) {
		return prog.Start(ctx, h.hostFor(b), cfg.limits())
	}, func(late abi.Script) { _ = late.Close(context.Background()) })
	if err != nil {
		next.closed.Store(true)
		if fresh {
			r.discard(ctx)
		} else {
			r.timers.GoLive(nil) // what the failed version armed fires in the running one
		}
		if shadow != nil {
			shadow.discard()
		}
		var se *StuckError
		if errors.As(err, &se) {
			retry = false // the runtime ignored its deadline: another try may stick too
			return err
		}
		return fmt.Errorf("start %s: %w", path, err)
	}
	next.script = script
	if err := h.startPool(lctx, r, next, b, prog, cfg); err != nil {
		var se *StuckError
		retry = !errors.As(err, &se)
		r.closeInstance(ctx, next, "new version")
		if fresh {
			r.discard(ctx)
		} else {
			r.timers.GoLive(nil)
		}
		return fmt.Errorf("start %s: %w", path, err)
	}
	if shadow != nil {
		return shadow.start(ctx, h.ctx)
	}
	if err := h.install(ctx, r, next); err != nil {
		r.closeInstance(ctx, next, "new version")
		if fresh {
			r.discard(ctx)
		} else {
			r.timers.GoLive(nil)
		}
		return fmt.Errorf("install %s: %w", path, err)
	}
	if fresh {
		h.mu.Lock()
		h.slots[path] = r
		h.mu.Unlock()
		h.log.Info("rule loaded", "rule", r.name, "kind", r.kind)
	} else {
		h.log.Info("rule reloaded", "rule", r.name, "kind", r.kind)
	}
	return nil
}

// install makes next the running version of r, between two events. A
// version stuck in a call is abandoned once the call is overdue, and a
// fresh worker installs next in its place. A load whose ctx has ended
// installs nothing (and starts no worker for a fresh rule).
func (h *Host) install(ctx context.Context, r *rule, next *instance) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := r.worker()
	if w == nil {
		w = r.startWorker()
	}
	swap := func() { r.swap(h.ctx, next) }
	err := w.do(ctx, r.config().Grace, swap)
	if errors.Is(err, errStuck) {
		r.abandoned(w, "reload")
		err = r.startWorker().do(ctx, r.config().Grace, swap)
	}
	return err
}

// lockLoads takes the lock that serialises Load, Remove and Close.
func (h *Host) lockLoads(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case h.loads <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	if h.closing.Err() != nil {
		<-h.loads
		return ErrClosed
	}
	return nil
}

func (h *Host) unlockLoads() { <-h.loads }

// Remove stops the rule loaded from path and releases its watches and
// locks. A rule stuck in a call is abandoned once the call is overdue (see
// RuleConfig.Grace); the host releases its watches and locks itself. The
// rule's timers are deleted from the store: its file is gone. (Close, by
// contrast, keeps them for the next run.)
func (h *Host) Remove(ctx context.Context, path string) error {
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	defer h.unlockLoads()
	r := h.takeSlot(path)
	h.outcomes.Forget(path)
	shared := h.group != nil && h.group.Forget(path)
	if r == nil {
		if shared {
			return nil // a standby rule: another host runs it
		}
		return fmt.Errorf("remove %s: not loaded", path)
	}
	err := h.stopRule(ctx, r, "remove")
	if !shared { // a shared rule's timers move to the host that takes it over
		r.timers.Drop(ctx)
	}
	return err
}

// takeSlot removes the rule loaded from path from the host's slots and
// returns it (nil if none was).
func (h *Host) takeSlot(path string) *rule {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.slots[path]
	delete(h.slots, path)
	return r
}

// stopRule ends the rule r, for why ("remove", "shutdown"): its call in
// progress is cancelled, and its worker stops it between two events; a
// worker stuck in its call past the grace (or when ctx ends) is abandoned
// and the rule released from here.
func (h *Host) stopRule(ctx context.Context, r *rule, why string) error {
	r.cancel() // a handler in progress ends now
	if err := r.stop(ctx, why); err != nil {
		return fmt.Errorf("stop %s: %w", r.name, err)
	}
	h.log.Info("rule stopped", "rule", r.name)
	return nil
}

// Status lists the loaded rules and the rule files that failed to load
// (StateLoadFailed), sorted by path.
func (h *Host) Status() []RuleStatus {
	rs := h.loaded()
	var out []RuleStatus
	for _, f := range h.outcomes.List() {
		out = append(out, RuleStatus{Path: f.Path, Kind: f.Kind, Hash: shortHash(f.Hash), State: StateLoadFailed,
			LastError: f.Err, LastErrorAt: f.At, NextRetry: f.NextRetry})
	}
	if h.group != nil {
		out = append(out, h.standbyStatus()...)
	}
	for _, r := range rs {
		out = append(out, r.status())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// Why returns the last write a rule of this host made to key (set, del or
// vdel), with the event it handled and the chain back to the outside
// change that started it; false when no rule wrote key since the host
// started, or the journal has forgotten it (see Config.JournalEntries).
func (h *Host) Why(key string) (provenance.Write, bool) { return h.journal.Get(key) }

// Stats are host-wide counters.
type Stats struct {
	Notifications uint64 // notifications received
	LoopsDamped   uint64 // events dropped by the feedback-loop damper
	Resyncs       uint64 // resync events produced after reconnects
	LoadRetries   uint64 // rule files started on a retry after their start failed (loadretry.go)
	WatchedKeys   int    // keys registered with the store
	Stuck         int    // runtime calls abandoned as stuck and still running
	Timers        int    // timers armed by the loaded rules
	// LoadFailed counts the rule files whose last load failed and of which
	// no version runs (a failed reload keeps the previous version running,
	// and is not counted). In a group, a shared rule counts only on its
	// owner, and not once the owner withdrew its version (Withdrawn counts
	// that): a failure of a rule another member is to run is listed in
	// Status but not counted here (host/internal/group/ready.go).
	LoadFailed int
	// Owned and Standby count, in a group (Config.Group), the shared rules
	// this host runs and those another host runs; Withdrawn those whose
	// version here failed to load and which this host no longer offers,
	// another member offering the rule (GroupStatus.Withdrawn).
	Owned, Standby, Withdrawn int
	// Patterns are the pattern watches' counters (watch_pattern).
	Patterns PatternStats
}

// PatternStats are a host's pattern watch counters (Stats): patterns
// watched (each counted once), scans and the SCAN pages they read, keys
// found after a pattern's first scan, keys left out past max_watched_keys,
// failed scans.
type PatternStats = patternwatch.Stats

// Stats returns host-wide counters.
func (h *Host) Stats() Stats {
	s := Stats{Notifications: h.events.Load(), LoopsDamped: h.damped.Load(), Resyncs: h.resyncs.Load(),
		LoadRetries: h.loadRetries.Load(), WatchedKeys: h.reg.WatchedKeys(), Stuck: h.calls.Stuck(), Patterns: h.pats.Stats()}
	var excused func(path string) bool // in a group, the shared rules another member is to run
	if h.group != nil {
		excused = h.group.Excuses
	}
	s.LoadFailed = h.outcomes.Count(excused)
	for _, r := range h.loaded() {
		s.Timers += r.timers.Count()
	}
	if h.group != nil {
		gs := h.group.Status()
		s.Owned, s.Standby, s.Withdrawn = len(gs.Owned), len(gs.Standby), len(gs.Withdrawn)
		s.Resyncs += h.group.Resyncs()
	}
	return s
}

// Close stops every rule (releasing watches and locks), then the dispatcher.
// It does not close the client. It returns by the time ctx ends: rules stuck
// in a call are abandoned once the call is overdue, or when ctx ends; then
// Close waits for abandoned calls to end for at most their rules' grace and
// returns an error naming those still running. Loads in progress fail, and
// later ones too. Calling Close again returns nil.
func (h *Host) Close(ctx context.Context) error {
	if !h.closeOnce.CompareAndSwap(false, true) {
		return nil
	}
	h.startClosing()
	if h.group != nil { // no more rules taken over or handed over
		h.groupStop()
		<-h.groupDone
	}
	var errs []error
	select {
	case h.loads <- struct{}{}: // loads in progress end within their grace
		defer h.unlockLoads()
	case <-ctx.Done():
		errs = append(errs, fmt.Errorf("a rule load did not end: %w", ctx.Err()))
	}
	h.mu.Lock()
	rules := make([]*rule, 0, len(h.slots))
	for _, r := range h.slots {
		rules = append(rules, r)
	}
	clear(h.slots)
	h.mu.Unlock()
	for _, r := range rules {
		r.cancel()
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range rules {
		wg.Go(func() {
			if err := h.stopRule(ctx, r, "shutdown"); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if h.group != nil {
		h.group.Close(ctx)
	}
	h.cancel()
	h.wg.Wait()
	if h.dry != nil {
		if err := h.dry.Close(); err != nil {
			errs = append(errs, fmt.Errorf("the dry run's staging: %w", err))
		}
	}
	if left := h.calls.Wait(ctx); len(left) > 0 {
		errs = append(errs, fmt.Errorf("%d runtime call(s) still running: %s", len(left), strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// StuckError is the error of a runtime call that did not return within
// its deadline and grace: the rule's file and the step (see package
// internal/abandon).
type StuckError = abandon.StuckError
