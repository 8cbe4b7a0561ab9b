package host

import (
	"context"
	"log/slog"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/abandon"
	"github.com/ssrun/ssrun/host/internal/gate"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/internal/lineage"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/internal/patternwatch"
	"github.com/ssrun/ssrun/host/internal/ruletimers"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/host/internal/watch"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/host/staging"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// services are the parts of the host that its rules use: the rules and
// their leases share one, not the Host.
type services struct {
	ctx     context.Context // the host's lifetime: rules and lease renewals end with it
	client  Store           // lock requests (a binding gets its own reference)
	log     *slog.Logger
	reg     *watch.Registry     // watches
	pats    *patternwatch.Hub   // pattern watches (host/internal/patternwatch)
	lin     *lineage.Table      // the feedback-loop damper
	journal *provenance.Journal // the last write per key, for Why
	calls   *abandon.Tracker    // goroutines running runtime calls
	clock   clock.Clock         // the host's clock (see clock.Clock)
	now     func() time.Time    // the lease clock: clock.Now, or a test's
	timers  *timers.Scheduler   // every rule's pending timers, and their clock
	quiet   *serial.Quiet       // a serial host's activity and turn (nil: not serial)
	host    *Host               // the Host these services are of (HostOf)
	obs     Observer            // handler calls, for metrics (nil: none)
	trace   Tracer              // what becomes of events, for the console (nil: none)
	rec     Recorder            // what the rules see, for a trace (nil: none)
	dry     *staging.Staging    // a dry run's staged writes (nil: writes go to the store)
	kv      ruletimers.Store    // where timers are kept: the client, or a dry run's staging
	gate    gate.Gate           // bounds the handler calls running at once
	group   groupFence          // the host's group (nil: none): fences owned rules' writes
}

// groupFence is what the rules of a host in a group use of it (its
// *group.Ownership, host/internal/group/fence.go).
type groupFence interface {
	// Fence returns the token a write of the rule carries: its ownership
	// lease's (zero for a rule the group does not share), or LOCK_LOST.
	Fence(rule, verb, key string) (hlc.HLC, error)
	// Refenced renews the rule's lease after the store refused its write
	// with err, and returns the new token if the write may be retried.
	Refenced(ctx context.Context, rule string, err error) (hlc.HLC, bool)
	// ProgressFor returns where an owned rule records what it handled.
	ProgressFor(rule string) *membership.Progress
}

// leaseServices are the services a rule's leases (and the group's) use.
func (s *services) leaseServices() *lease.Services {
	return &lease.Services{Ctx: s.ctx, Client: s.client, Log: s.log, Waits: s.reg, Clock: s.clock, Now: s.now, Quiet: s.quiet}
}

// timerServices are the services a rule's timers use; in a group, their
// writes are fenced by the group's fence.
func (s *services) timerServices() *ruletimers.Services {
	ts := &ruletimers.Services{Ctx: s.ctx, Log: s.log, Clock: s.clock, Quiet: s.quiet, Store: s.kv, Scheduler: s.timers}
	if s.group != nil {
		ts.Fence = s.group.Fence
	}
	return ts
}
