package observe

import (
	"time"

	"github.com/ssrun/ssrun/host/provenance"
)

// Tracer is told what becomes of the events on their way to the rules: the
// handler calls that returned (Ran), the events a rule did not get (Skipped,
// with why), the writes the store applied (Wrote) and the host calls its
// permissions refused (Denied). Package admin keeps the last of each in
// bounded rings for its console (recent runs, the live feed, "why not").
// It is called on the dispatcher's and the rules' worker goroutines, so it
// must be fast and must not block or call the Host. A nil Config.Tracer
// costs nothing.
type Tracer interface {
	Ran(Run)
	Skipped(Skip)
	Wrote(rule string, step provenance.Step, cause provenance.Cause)
	Denied(rule, verb, key string)
}

// SkipReason says why a rule did not get an event.
type SkipReason string

// The reasons of a Skip.
const (
	// SkipDamped: the feedback-loop damper dropped the change before any
	// rule got it (Skip.Rule is empty: every rule watching the key).
	SkipDamped SkipReason = "damped loop"
	// SkipMailboxFull: the rule's mailbox was full.
	SkipMailboxFull SkipReason = "mailbox full"
	// SkipEcho: the change was the echo of the rule's own write.
	SkipEcho SkipReason = "echo of its own write"
	// SkipDisabled: the rule is disabled after repeated failures.
	SkipDisabled SkipReason = "disabled"
	// SkipUnwatched: the rule stopped watching the key before the event's
	// turn came (it unwatched it, or a reload dropped the watch).
	SkipUnwatched SkipReason = "no longer watched"
	// SkipCoalesced: a newer change of the key (Skip.Into) replaced the
	// event while it waited in the rule's mailbox (mode latest or restart,
	// or a full mailbox); the rule gets that one.
	SkipCoalesced SkipReason = "coalesced"
)

// Skip is an event a rule did not get.
type Skip struct {
	Rule   string           // file name; empty for every rule (SkipDamped)
	Event  provenance.Cause // the event, and who caused it
	Reason SkipReason
	At     time.Time
	Into   string // SkipCoalesced: the version of the change that replaced it
}

// Run is one handler call that returned.
type Run struct {
	Rule  string           // file name
	Event provenance.Cause // the event handled, and who caused it
	At    time.Time
	Took  time.Duration
	Err   string // empty: handled
	// Origin is the change from outside the rules that started the chain
	// the event is on (nil: a timer, a lost lock, a write outside a
	// handler).
	Origin *provenance.Origin
}
