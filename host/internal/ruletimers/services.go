package ruletimers

import (
	"context"
	"log/slog"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// What a rule's timers use of the host, which builds them (the host's
// services.timerServices), and what they take a version of the rule to be.

// Services are the parts of the host that a rule's timers use.
type Services struct {
	Ctx       context.Context // the host's lifetime: a firing's record is written under it
	Log       *slog.Logger
	Clock     clock.Clock       // the host's clock: waits between a write's attempts
	Quiet     *serial.Quiet     // a serial host's activity and turn (nil: not serial)
	Store     Store             // where timers are kept: the store client, or a dry run's staging
	Scheduler *timers.Scheduler // every rule's pending timers, and their clock
	// Fence returns the token a write of a rule's timer key carries: the
	// ownership lease's of a rule the host's group shares (zero for one it
	// does not share), or LOCK_LOST when the host no longer owns the rule
	// for certain. Nil outside a group: the writes carry no token.
	Fence func(rule, verb, key string) (hlc.HLC, error)
}

// Store is what timers need of the store: the client, or a dry run's
// staging.
type Store interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
	Del(ctx context.Context, key []byte, opts protocol.DelOptions) (int64, error)
}

// Version is a version of the rule: the host's *instance, of which a
// reload starts a new one. A timer armed by a version that is not the live
// one is held until it is (Timers.GoLive). The timers only compare versions,
// by identity, and call none of their methods: Replaced is what makes a
// value a version, as in patternwatch.Version.
type Version interface {
	// Replaced reports whether the version was replaced or stopped.
	Replaced() bool
}
