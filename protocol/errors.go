package protocol

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/ssrun/ssrun/protocol/wire"
)

// Client-side failures.
var (
	// ErrNotConnected is returned at once by a call made while the client has
	// no usable connection (never connected yet, or reconnecting). The
	// request was not sent.
	ErrNotConnected = errors.New("not connected to the state store")
	// ErrConnectionLost fails a call whose connection dropped before the
	// response arrived. The request may or may not have been applied.
	ErrConnectionLost = errors.New("connection lost before the response arrived")
	// ErrClosed is returned by calls made after Close (or after the context
	// given to New ended) and fails calls pending at that moment.
	ErrClosed = errors.New("client closed")
	// ErrTimeout fails a call whose per-call timeout passed before the
	// response arrived. Errors wrapping it also match context.DeadlineExceeded.
	// The request may or may not have been applied.
	ErrTimeout = errors.New("request timed out")
	// ErrRejected reports a request the broker refused with a failing PUBACK
	// reason code (for example not authorized to publish).
	ErrRejected = errors.New("broker rejected the request")
	// ErrUnexpectedReply reports a response that does not have the shape the
	// protocol allows for the command (payload, status, content type,
	// protocol version or timestamp). The wrapping error says what was wrong.
	ErrUnexpectedReply = errors.New("unexpected reply")
	// ErrStatus is what every *StatusError unwraps to: the state store
	// answered with an AIO RPC status other than 200.
	ErrStatus = errors.New("error status from the state store")
	// ErrEventsDropped is carried by an EventOverflow event.
	ErrEventsDropped = errors.New("events dropped because the event queue was full")
	// ErrTooLarge is what every *TooLargeError unwraps to: a request whose
	// packet would exceed the broker's maximum packet size. It was not sent.
	ErrTooLarge = errors.New("request larger than the broker's maximum packet size")
)

// TooLargeError refuses a request whose encoded PUBLISH packet would be
// larger than the Maximum Packet Size the broker announced in the CONNACK
// of the current connection. Sending it would make the broker drop the
// connection (MQTT 5 §3.1.2.24: reason 0x95), failing every call in flight,
// and the session would send it again on the next connection; so it is
// refused before it is sent, and the connection is untouched. It unwraps
// to ErrTooLarge.
type TooLargeError struct {
	Size int // the request's packet, in bytes
	Max  int // the broker's maximum packet size
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("request of %d bytes, over the broker's maximum packet size of %d bytes (announced in its CONNACK): not sent", e.Size, e.Max)
}

// Unwrap returns ErrTooLarge.
func (e *TooLargeError) Unwrap() error { return ErrTooLarge }

// Service errors: the `-ERR <text>` replies of statestore-protocol.md §8. Each
// sentinel's message is the exact wire text. A *ServiceError unwraps to one of
// them, or to ErrUnknownServiceError for a text not in the table.
var (
	ErrTimestampSkew            = errors.New(wire.ErrTextTimestampSkew)       // E1
	ErrMissingFencingToken      = errors.New(wire.ErrTextMissingFencingToken) // E2
	ErrFencingTokenSkew         = errors.New(wire.ErrTextFencingTokenSkew)    // E3
	ErrFencingTokenLowerVersion = errors.New(wire.ErrTextFencingTokenLower)   // E4
	ErrQuotaExceeded            = errors.New(wire.ErrTextQuotaExceeded)       // E5
	ErrSyntax                   = errors.New(wire.ErrTextSyntax)              // E6
	ErrNotAuthorized            = errors.New(wire.ErrTextNotAuthorized)       // E7
	ErrUnknownCommand           = errors.New(wire.ErrTextUnknownCommand)      // E8
	ErrWrongNumberOfArguments   = errors.New(wire.ErrTextWrongNumberOfArgs)   // E9
	ErrTimestampMissing         = errors.New(wire.ErrTextTimestampMissing)    // E10
	ErrTimestampMalformed       = errors.New(wire.ErrTextTimestampMalformed)  // E11
	// ErrKeyLengthZero (E12) is also returned, without a round trip, for a
	// call made with an empty key: the server would refuse it anyway.
	ErrKeyLengthZero = errors.New(wire.ErrTextKeyLengthZero)
	// ErrUnknownServiceError is what a *ServiceError with a text outside §8
	// unwraps to; the text itself is kept in ServiceError.Text.
	ErrUnknownServiceError = errors.New("unknown state store error")
)

// serviceErrors maps each §8 text to its sentinel.
var serviceErrors = func() map[string]error {
	m := map[string]error{}
	for _, e := range []error{
		ErrTimestampSkew, ErrMissingFencingToken, ErrFencingTokenSkew,
		ErrFencingTokenLowerVersion, ErrQuotaExceeded, ErrSyntax, ErrNotAuthorized,
		ErrUnknownCommand, ErrWrongNumberOfArguments, ErrTimestampMissing,
		ErrTimestampMalformed, ErrKeyLengthZero,
	} {
		m[e.Error()] = e
	}
	return m
}()

// ServiceError is a `-ERR <text>` reply: the state store refused the
// command. Text is the reply text as received (without `-ERR `).
type ServiceError struct {
	Text string
}

func (e *ServiceError) Error() string { return "state store error: " + e.Text }

// Unwrap returns the sentinel for Text (ErrSyntax, ErrFencingTokenLowerVersion,
// ...), or ErrUnknownServiceError when the text is not one of §8.
func (e *ServiceError) Unwrap() error {
	if s, ok := serviceErrors[e.Text]; ok {
		return s
	}
	return ErrUnknownServiceError
}

// StatusKind classifies a non-200 AIO RPC status the way the SDKs decode it
// (statestore-protocol.md §3).
type StatusKind uint8

// Status kinds.
const (
	StatusUnknown            StatusKind = iota // any other code, or 500 without detail
	StatusPayloadInvalid                       // 400/415 without __propName
	StatusHeaderMissing                        // 400/415 with __propName only
	StatusHeaderInvalid                        // 400/415 with __propName and __propVal
	StatusTimeout                              // 408
	StatusApplicationError                     // 500 with __apErr=true
	StatusInternalLogicError                   // 500 with __propName
	StatusStateInvalid                         // 503
	StatusUnsupportedVersion                   // 505
)

var statusKindNames = [...]string{
	StatusUnknown:            "unknown error",
	StatusPayloadInvalid:     "payload invalid",
	StatusHeaderMissing:      "header missing",
	StatusHeaderInvalid:      "header invalid",
	StatusTimeout:            "timeout",
	StatusApplicationError:   "application error",
	StatusInternalLogicError: "internal logic error",
	StatusStateInvalid:       "state invalid",
	StatusUnsupportedVersion: "unsupported version",
}

func (k StatusKind) String() string {
	if int(k) < len(statusKindNames) {
		return statusKindNames[k]
	}
	return "status kind " + strconv.Itoa(int(k))
}

// StatusError is a response whose `__stat` is not 200: a transport-level
// failure reported by the state store (§3, §4). It unwraps to ErrStatus.
type StatusError struct {
	Code          int        // the __stat value
	Kind          StatusKind // decoded per §3
	Message       string     // __stMsg
	PropertyName  string     // __propName
	PropertyValue string     // __propVal
	// Timeout is __propVal of a 408 decoded as an ISO-8601 duration; zero
	// when absent or not parsable.
	Timeout time.Duration
	// RequestProtocolVersion and SupportedMajorVersions are __requestProtVer
	// and __supProtMajVer of a 505.
	RequestProtocolVersion string
	SupportedMajorVersions string
}

func (e *StatusError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "state store status %d (%s)", e.Code, e.Kind)
	if e.PropertyName != "" {
		fmt.Fprintf(&b, ", property %q", e.PropertyName)
		if e.PropertyValue != "" {
			fmt.Fprintf(&b, " = %q", e.PropertyValue)
		}
	}
	if e.Kind == StatusUnsupportedVersion {
		fmt.Fprintf(&b, ", sent version %q, supported majors %q", e.RequestProtocolVersion, e.SupportedMajorVersions)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// Unwrap returns ErrStatus.
func (e *StatusError) Unwrap() error { return ErrStatus }

// decodeStatus checks `__stat`: nil for 200, a *StatusError for another
// code, an ErrUnexpectedReply error when it is missing or not a number.
func decodeStatus(user paho.UserProperties) error {
	stat, ok := userProp(user, wire.PropStatus)
	if !ok {
		return fmt.Errorf("%w: response has no %s user property (does the broker strip user properties?)", ErrUnexpectedReply, wire.PropStatus)
	}
	if stat == wire.StatusOK {
		return nil
	}
	code, err := strconv.Atoi(stat)
	if err != nil || code < 100 || code > 999 {
		return fmt.Errorf("%w: %s %q is not a status code", ErrUnexpectedReply, wire.PropStatus, stat)
	}
	if code == 200 { // e.g. "0200"
		return nil
	}
	e := &StatusError{Code: code}
	e.Message, _ = userProp(user, wire.PropStatusMsg)
	name, hasName := userProp(user, wire.PropName)
	value, hasValue := userProp(user, wire.PropValue)
	e.PropertyName, e.PropertyValue = name, value
	switch code {
	case 400, 415:
		switch {
		case !hasName && !hasValue:
			e.Kind = StatusPayloadInvalid
		case !hasValue:
			e.Kind = StatusHeaderMissing
		default:
			e.Kind = StatusHeaderInvalid
		}
	case 408:
		e.Kind = StatusTimeout
		if d, err := parseISODuration(value); err == nil {
			e.Timeout = d
		}
	case 500:
		ap, _ := userProp(user, wire.PropAppErr)
		switch {
		case strings.EqualFold(ap, "true"):
			e.Kind = StatusApplicationError
		case hasName:
			e.Kind = StatusInternalLogicError
		}
	case 503:
		e.Kind = StatusStateInvalid
	case 505:
		e.Kind = StatusUnsupportedVersion
		e.RequestProtocolVersion, _ = userProp(user, wire.PropRequestVer)
		e.SupportedMajorVersions, _ = userProp(user, wire.PropSupportedVer)
	}
	return e
}

// userProp returns the first user property named key.
func userProp(user paho.UserProperties, key string) (string, bool) {
	for _, p := range user {
		if p.Key == key {
			return p.Value, true
		}
	}
	return "", false
}

// maxISODuration bounds parsed durations so arithmetic cannot overflow.
const maxISODuration = 100 * 365 * 24 * time.Hour

// parseISODuration parses the ISO-8601 durations the AIO SDKs put in
// __propVal of a 408: `P[nW][nD][T[nH][nM][n[.f]S]]`, for example `PT10S`,
// `PT1.5S`, `P1DT2H`. Years and months (calendar-dependent) are refused, as
// are empty durations (`P`, `PT`) and values beyond 100 years.
func parseISODuration(s string) (time.Duration, error) {
	bad := func(why string) (time.Duration, error) {
		return 0, fmt.Errorf("duration %q: %s", s, why)
	}
	if len(s) < 3 || s[0] != 'P' {
		return bad("want P[nW][nD][T[nH][nM][nS]]")
	}
	rest := s[1:]
	var total time.Duration
	inTime, any := false, false
	order := 0 // position of the last unit, to enforce W D T H M S order
	for rest != "" {
		if rest[0] == 'T' {
			if inTime {
				return bad("second T")
			}
			inTime, rest = true, rest[1:]
			if rest == "" {
				return bad("T without a time part")
			}
			continue
		}
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) {
			return bad("want a number followed by a unit")
		}
		num, unit := rest[:i], rest[i]
		rest = rest[i+1:]
		var u time.Duration
		var pos int
		switch {
		case !inTime && unit == 'W':
			u, pos = 7*24*time.Hour, 1
		case !inTime && unit == 'D':
			u, pos = 24*time.Hour, 2
		case inTime && unit == 'H':
			u, pos = time.Hour, 3
		case inTime && unit == 'M':
			u, pos = time.Minute, 4
		case inTime && unit == 'S':
			u, pos = time.Second, 5
		default:
			return bad(fmt.Sprintf("unit %q not allowed here", unit))
		}
		if pos <= order {
			return bad("units out of order or repeated")
		}
		order = pos
		whole, frac, hasFrac := strings.Cut(num, ".")
		if whole == "" || strings.IndexByte(frac, '.') >= 0 || (hasFrac && (frac == "" || unit != 'S' || rest != "")) {
			return bad("malformed number (a fraction is allowed on the seconds only)")
		}
		n, err := strconv.ParseInt(whole, 10, 64)
		if err != nil || n > int64(maxISODuration/u) {
			return bad("value out of range")
		}
		d := time.Duration(n) * u
		if hasFrac {
			if len(frac) > 9 {
				frac = frac[:9]
			}
			f, _ := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
			d += time.Duration(f)
		}
		total += d
		if total > maxISODuration {
			return bad("value out of range")
		}
		any = true
	}
	if !any {
		return bad("no value")
	}
	return total, nil
}
