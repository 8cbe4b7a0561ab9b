package protocol

import (
	"context"
	"errors"
	"time"
)

// Observer is told about every request the client makes, once it has
// ended: for metrics (package admin turns it into Prometheus series). It is
// called on the caller's goroutine, so it must be fast and must not block
// or call the Client. A nil Config.Observer costs nothing.
type Observer interface {
	// ObserveRequest reports one request: its command ("get", "set", "del",
	// "vdel", "keynotify", "keynotify stop"), how it ended (one of the
	// Outcome constants) and how long it took, from the call to its end.
	ObserveRequest(command string, outcome Outcome, took time.Duration)
}

// Outcome is how a request ended, as reported to an Observer.
type Outcome string

// The outcomes of a request.
const (
	OutcomeOK             Outcome = "ok"              // a response that is not -ERR
	OutcomeServiceError   Outcome = "service_error"   // a -ERR response (*ServiceError)
	OutcomeTimeout        Outcome = "timeout"         // no response in time (ErrTimeout, or the context's deadline)
	OutcomeNotConnected   Outcome = "not_connected"   // failed fast: no connection (ErrNotConnected)
	OutcomeConnectionLost Outcome = "connection_lost" // the connection dropped while waiting (ErrConnectionLost)
	OutcomeCanceled       Outcome = "canceled"        // the caller's context was cancelled, or the client closed
	OutcomeTooLarge       Outcome = "too_large"       // not sent: over the broker's maximum packet size (ErrTooLarge)
	OutcomeError          Outcome = "error"           // anything else: a malformed or rejected response
)

// outcomeOf classifies the error of a finished call.
func outcomeOf(err error) Outcome {
	var se *ServiceError
	switch {
	case err == nil:
		return OutcomeOK
	case errors.As(err, &se):
		return OutcomeServiceError
	case errors.Is(err, ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	case errors.Is(err, ErrNotConnected):
		return OutcomeNotConnected
	case errors.Is(err, ErrConnectionLost):
		return OutcomeConnectionLost
	case errors.Is(err, ErrClosed), errors.Is(err, context.Canceled):
		return OutcomeCanceled
	case errors.Is(err, ErrTooLarge):
		return OutcomeTooLarge
	}
	return OutcomeError
}

// Connected reports whether the client has a connection that calls may use
// now (connected and subscribed, as AwaitConnection waits for).
func (c *Client) Connected() bool { return c.readyConn() != nil }
