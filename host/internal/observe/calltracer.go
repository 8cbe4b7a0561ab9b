package observe

import (
	"time"

	"github.com/ssrun/ssrun/abi"
)

// CallTracer is what a Tracer may also be, to be told each host call a
// rule makes while it handles an event (its verb, key, status and
// duration, never a value): for a trace that shows a run's calls (the
// OTLP export). The rules' hosts are wrapped for it only when TracesCalls
// says so as the version starts, so a tracer that does not want the calls
// costs nothing per call.
type CallTracer interface {
	TracesCalls() bool
	// Called is told a call of rule during a handler; on the rule's
	// goroutine, so it must be fast and must not call the Host.
	Called(rule string, c TracedCall)
}

// TracedCall is one host call a rule made during a handler.
type TracedCall struct {
	Verb   string // get, set, del, ...
	Key    string // the key, lock, timer or pattern
	Status abi.Status
	At     time.Time
	Took   time.Duration
}
