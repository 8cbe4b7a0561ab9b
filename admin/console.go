package admin

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
)

// The console's memory of what became of events: a host.Tracer that keeps,
// in bounded rings, the recent entries (runs and skips) for the live page,
// each rule's recent runs per outcome (so failures are not pushed out by
// successes), and per rule and key the last thing that happened, for "why
// not". It fans entries out to the live streams without ever blocking the
// rule that reports them (stream.go).

// Console bounds (ConsoleConfig's zero values).
const (
	DefaultRecent     = 512  // entries of the live page's ring
	DefaultPerOutcome = 20   // runs kept per rule and outcome
	DefaultLastSeen   = 4096 // (rule, key) pairs remembered for why-not
	maxPendingWrites  = 64   // writes of one call kept with its run
)

// The outcomes of an Entry: a run's, or a skip's reason.
const (
	OutcomeHandled = "handled"
	OutcomeFailed  = "failed"
	OutcomeDenied  = "denied" // handled or failed, with a host call refused by the rule's permissions
	OutcomeFenced  = "fenced" // failed on a write under a lock (or a group's lease) it no longer held
	OutcomeDropped = "dropped"
	OutcomeSkipped = "skipped" // an echo, a key no longer watched, a change coalesced into a newer one
)

// Entry is one line of the live feed: a handler run, or an event a rule did
// not get.
type Entry struct {
	Seq     uint64    `json:"seq"`
	At      time.Time `json:"at"`
	Kind    string    `json:"kind"` // run or skip
	Rule    string    `json:"rule,omitempty"`
	Key     string    `json:"key"`
	Op      string    `json:"op"`
	Version string    `json:"version,omitempty"`
	Resync  bool      `json:"resync,omitempty"`
	// ByRule or ByClient caused the event: a rule of this host, or the
	// client id of an outside writer when the store names it.
	ByRule   string            `json:"by_rule,omitempty"`
	ByClient string            `json:"by_client,omitempty"`
	Outcome  string            `json:"outcome"`
	Reason   string            `json:"reason,omitempty"` // a skip's host.SkipReason
	Into     string            `json:"into,omitempty"`   // a coalesced skip's: the version that replaced it
	TookMS   float64           `json:"took_ms,omitempty"`
	Err      string            `json:"error,omitempty"`
	Writes   []provenance.Step `json:"writes,omitempty"`
	Denied   []string          `json:"denied,omitempty"` // "verb key" of the host calls refused
	// Origin is the outside change that started the run's chain.
	Origin *provenance.Origin `json:"origin,omitempty"`
}

// ConsoleConfig bounds a Console; zero fields take the defaults.
type ConsoleConfig struct {
	Recent, PerOutcome, LastSeen int
	// ClientBuffer and ClientRate bound each live stream (stream.go).
	ClientBuffer int
	ClientRate   int
	MaxClients   int
	// WriteTimeout cuts off a stream whose client has not taken a write
	// for that long (DefaultStreamWriteTimeout).
	WriteTimeout time.Duration
}

// Console is the host.Tracer of the admin console. Create it with
// NewConsole and give it to host.Config.Tracer.
type Console struct {
	cfg ConsoleConfig

	mu      sync.Mutex
	seq     uint64
	recent  *ring
	runs    map[string]map[string]*ring // rule -> outcome -> its runs
	calls   map[string]*call            // rule -> its call in progress
	seen    map[pairKey]Entry           // the last entry per (rule, key); rule "" for damped changes
	seenAge []pairKey                   // FIFO of seen's keys, to bound it
	subs    map[*stream]struct{}
	// sink, when set (before the host runs), is handed each run as it
	// ends, with the host calls it made, outside the lock: the OTLP export
	// (otlp.go). Only then are the calls traced (TracesCalls), and
	// wroteSink told of each write made during a handler.
	sink      func(e Entry, took time.Duration, calls []host.TracedCall)
	wroteSink func(rule string, step provenance.Step, cause provenance.Cause)
}

type pairKey struct{ rule, key string }

// call is what a rule did during its call in progress.
type call struct {
	writes []provenance.Step
	denied []string
	calls  []host.TracedCall // only with a sink
}

var (
	_ host.Tracer     = (*Console)(nil)
	_ host.CallTracer = (*Console)(nil)
)

// TracesCalls implements host.CallTracer: the host calls are wanted only
// for an export (Attach).
func (c *Console) TracesCalls() bool { return c.sink != nil }

// Called implements host.CallTracer: a host call during a handler joins
// its run, for the export.
func (c *Console) Called(rule string, tc host.TracedCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.callLocked(rule)
	if len(cl.calls) < maxPendingWrites {
		cl.calls = append(cl.calls, tc)
	}
}

// NewConsole returns a Console with cfg's bounds.
func NewConsole(cfg ConsoleConfig) *Console {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&cfg.Recent, DefaultRecent)
	def(&cfg.PerOutcome, DefaultPerOutcome)
	def(&cfg.LastSeen, DefaultLastSeen)
	def(&cfg.ClientBuffer, DefaultClientBuffer)
	def(&cfg.ClientRate, DefaultClientRate)
	def(&cfg.MaxClients, DefaultMaxClients)
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = DefaultStreamWriteTimeout
	}
	return &Console{cfg: cfg, recent: newRing(cfg.Recent), runs: map[string]map[string]*ring{},
		calls: map[string]*call{}, seen: map[pairKey]Entry{}, subs: map[*stream]struct{}{}}
}

// Wrote implements host.Tracer: a write during a call joins its run.
func (c *Console) Wrote(rule string, step provenance.Step, cause provenance.Cause) {
	if cause.Op == "" {
		return // outside a handler: no run to join
	}
	if c.wroteSink != nil {
		c.wroteSink(rule, step, cause)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.callLocked(rule)
	if len(cl.writes) < maxPendingWrites {
		cl.writes = append(cl.writes, step)
	}
}

// Denied implements host.Tracer.
func (c *Console) Denied(rule, verb, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	cl := c.callLocked(rule)
	if len(cl.denied) < maxPendingWrites {
		cl.denied = append(cl.denied, verb+" "+key)
	}
	// A watch refused at load has no run: remember it for why-not.
	if verb == "watch" {
		c.rememberLocked(pairKey{rule, key}, Entry{Kind: "skip", Rule: rule, Key: key, Outcome: OutcomeDenied,
			Reason: "watch " + key + ": not permitted", At: time.Now()})
	}
}

func (c *Console) callLocked(rule string) *call {
	cl := c.calls[rule]
	if cl == nil {
		cl = &call{}
		c.calls[rule] = cl
	}
	return cl
}

// Ran implements host.Tracer.
func (c *Console) Ran(r host.Run) {
	e := entryOf(r.Event)
	e.Kind, e.Rule, e.At, e.TookMS, e.Err, e.Origin = "run", r.Rule, r.At, float64(r.Took.Microseconds())/1000, r.Err, r.Origin
	var calls []host.TracedCall
	c.mu.Lock()
	if cl := c.calls[r.Rule]; cl != nil {
		e.Writes, e.Denied, calls = cl.writes, cl.denied, cl.calls
		delete(c.calls, r.Rule)
	}
	switch {
	case r.Err != "" && strings.Contains(r.Err, abi.StatusLockLost.String()):
		e.Outcome = OutcomeFenced
	case len(e.Denied) > 0:
		e.Outcome = OutcomeDenied
	case r.Err != "":
		e.Outcome = OutcomeFailed
	default:
		e.Outcome = OutcomeHandled
	}
	c.addLocked(e)
	c.mu.Unlock()
	if c.sink != nil {
		c.sink(e, r.Took, calls)
	}
}

// Skipped implements host.Tracer.
func (c *Console) Skipped(s host.Skip) {
	e := entryOf(s.Event)
	e.Kind, e.Rule, e.At, e.Reason, e.Into = "skip", s.Rule, s.At, string(s.Reason), s.Into
	e.Outcome = OutcomeDropped
	if s.Reason == host.SkipEcho || s.Reason == host.SkipUnwatched || s.Reason == host.SkipCoalesced {
		e.Outcome = OutcomeSkipped // nothing lost: a coalesced change's newer one reaches the rule
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.addLocked(e)
}

func entryOf(ev provenance.Cause) Entry {
	return Entry{Key: ev.Key, Op: ev.Op, Version: ev.Version, Resync: ev.Resync, ByRule: ev.Rule, ByClient: ev.Client}
}

// addLocked numbers e, keeps it and sends it to the streams.
func (c *Console) addLocked(e Entry) {
	c.seq++
	e.Seq = c.seq
	c.recent.push(e)
	if e.Rule != "" {
		byOutcome := c.runs[e.Rule]
		if byOutcome == nil {
			byOutcome = map[string]*ring{}
			c.runs[e.Rule] = byOutcome
		}
		r := byOutcome[e.Outcome]
		if r == nil {
			r = newRing(c.cfg.PerOutcome)
			byOutcome[e.Outcome] = r
		}
		r.push(e)
	}
	if e.Op != string(abi.OpTimer) && e.Op != string(abi.OpLockLost) {
		c.rememberLocked(pairKey{e.Rule, e.Key}, e)
	}
	c.publishLocked(e)
}

// rememberLocked keeps e as the last entry of k, unless the one kept is of
// a later change (versions are hybrid logical clocks, in order as text:
// an event handled late does not hide the drop of a later change),
// forgetting the oldest pair beyond the bound.
func (c *Console) rememberLocked(k pairKey, e Entry) {
	old, ok := c.seen[k]
	if ok && e.Version != "" && old.Version > e.Version {
		return
	}
	if !ok {
		if len(c.seenAge) >= c.cfg.LastSeen {
			delete(c.seen, c.seenAge[0])
			c.seenAge = c.seenAge[1:]
		}
		c.seenAge = append(c.seenAge, k)
	}
	c.seen[k] = e
}

// Recent returns the entries of the ring, oldest first.
func (c *Console) Recent() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.recent.all()
}

// Runs returns the recent runs of rule (its file name) per outcome, the
// newest first.
func (c *Console) Runs(rule string) map[string][]Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string][]Entry{}
	for o, r := range c.runs[rule] {
		es := r.all()
		slices.Reverse(es)
		out[o] = es
	}
	return out
}

// keepOnly drops the runs the console keeps of rules not among names (the
// host's rules now: a removed rule's runs go when the rules page is next
// drawn).
func (c *Console) keepOnly(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for rule := range c.runs {
		if !slices.Contains(names, rule) {
			delete(c.runs, rule)
			delete(c.calls, rule)
		}
	}
}

// last returns the last entry of (rule, key), if the console has it.
func (c *Console) last(rule, key string) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.seen[pairKey{rule, key}]
	return e, ok
}

// ring is a bounded ring of entries, grown as they come.
type ring struct {
	size int
	buf  []Entry
	next int // where the next entry goes once buf is full
}

func newRing(n int) *ring { return &ring{size: n} }

func (r *ring) push(e Entry) {
	if len(r.buf) < r.size {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.next] = e
	r.next = (r.next + 1) % r.size
}

// all returns the entries, oldest first.
func (r *ring) all() []Entry {
	out := make([]Entry, 0, len(r.buf))
	out = append(out, r.buf[r.next:]...)
	return append(out, r.buf[:r.next]...)
}
