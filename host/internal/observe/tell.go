package observe

import (
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/provenance"
)

// This file tells a Tracer what the host saw. Each function takes the
// tracer first and does nothing when it is nil, so that the host calls
// them inline and a host without a tracer pays nothing more.

// Ran tells t, if any, about a call of rule's handler on ev (on the chain
// lin) that started at at and returned err after took; clip cuts err's
// message as the rule's status does.
func Ran(t Tracer, rule string, ev abi.Event, lin provenance.Lineage, at time.Time, took time.Duration, err error, clip func(string) string) {
	if t == nil {
		return
	}
	run := Run{Rule: rule, Event: provenance.CauseOf(ev, lin), At: at, Took: took, Origin: lin.Origin}
	if err != nil {
		run.Err = clip(err.Error())
	}
	t.Ran(run)
}

// Skipped tells t, if any, that rule did not get ev (on the chain lin),
// for reason, now by c.
func Skipped(t Tracer, rule string, ev abi.Event, lin provenance.Lineage, reason SkipReason, c clock.Clock) {
	if t != nil {
		t.Skipped(Skip{Rule: rule, Event: provenance.CauseOf(ev, lin), Reason: reason, At: c.Now()})
	}
}

// Coalesced tells t, if any, that the change of version into replaced ev
// (on the chain lin) while ev waited in rule's mailbox, now by c.
func Coalesced(t Tracer, rule string, ev abi.Event, lin provenance.Lineage, into string, c clock.Clock) {
	if t != nil {
		t.Skipped(Skip{Rule: rule, Event: provenance.CauseOf(ev, lin), Reason: SkipCoalesced, At: c.Now(), Into: into})
	}
}

// Damped tells t, if any, that the feedback-loop damper dropped ev (on
// the chain lin) before any rule got it, now by c.
func Damped(t Tracer, ev abi.Event, lin provenance.Lineage, c clock.Clock) {
	if t != nil {
		t.Skipped(Skip{Event: provenance.CauseOf(ev, lin), Reason: SkipDamped, At: c.Now()})
	}
}

// Wrote tells t, if any, about a write of rule the store applied (op on
// key, creating version), made while rule handled cause (zero: outside a
// handler).
func Wrote(t Tracer, rule, key, op, version string, cause provenance.Cause) {
	if t != nil {
		t.Wrote(rule, provenance.Step{Rule: rule, Key: key, Op: op, Version: version}, cause)
	}
}
