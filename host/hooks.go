package host

import (
	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/observe"
)

// This file gives the hooks through which the host is observed (package
// host/internal/observe, which documents them) their public names, and
// wraps a rule's host for them.

type (
	// Observer is told each handler call's time and result, for metrics
	// (Config.Observer).
	Observer = observe.Observer
	// Recorder is told what the rules see, for a trace that replays them
	// (Config.Recorder).
	Recorder = observe.Recorder
	// Call is one host call of a rule and its reply, for a Recorder.
	Call = observe.Call
	// Tracer is told what becomes of the events on their way to the rules
	// (Config.Tracer).
	Tracer = observe.Tracer
	// CallTracer is what a Tracer may also be, to be told each host call a
	// rule makes while it handles an event.
	CallTracer = observe.CallTracer
	// TracedCall is one host call a rule made during a handler.
	TracedCall = observe.TracedCall
	// SkipReason says why a rule did not get an event.
	SkipReason = observe.SkipReason
	// Skip is an event a rule did not get.
	Skip = observe.Skip
	// Run is one handler call that returned.
	Run = observe.Run
)

// The reasons of a Skip (see observe.SkipReason's constants).
const (
	SkipDamped      = observe.SkipDamped
	SkipMailboxFull = observe.SkipMailboxFull
	SkipEcho        = observe.SkipEcho
	SkipDisabled    = observe.SkipDisabled
	SkipUnwatched   = observe.SkipUnwatched
	SkipCoalesced   = observe.SkipCoalesced
)

// hostFor is what the version of b is started with: its chain
// (binding.chain), wrapped for the recorder and for a tracer that wants the
// calls (only when TracesCalls says so as the version starts), handed to
// the runtime as a handed.
func (s *services) hostFor(b *binding) abi.Host {
	h := b.chain()
	if s.rec != nil {
		h = &observe.Recorded{Next: h, Rec: s.rec, Name: b.r.name, Shadow: b.inShadow, NowMs: s.timers.Clock.NowMs}
	}
	if ct, ok := s.trace.(CallTracer); ok && ct.TracesCalls() {
		h = &observe.Traced{Next: h, T: ct, Name: b.r.name, Shadow: b.inShadow, Handling: func() bool { return b.handling().Op != "" }}
	}
	return handed{Host: h, b: b}
}

// handed is the abi.Host a runtime is given for a version of a rule: its
// chain, and the binding the chain ends in (RuleOf, HostOf).
type handed struct {
	abi.Host
	b *binding
}

// RuleOf returns the file name of the rule h serves (as in the logs and a
// Recorder's calls), when h is a host the Host gave a rule; a runtime's
// lua.Config.Rand uses it to give each rule its own generator.
func RuleOf(h abi.Host) (string, bool) {
	if hd, ok := h.(handed); ok {
		return hd.b.r.name, true
	}
	return "", false
}

// recordConnection reports the connection going up or down to the
// recorder.
func (s *services) recordConnection(up bool) {
	if s.rec != nil {
		s.rec.RecordConnection(s.timers.Clock.NowMs(), up)
	}
}
