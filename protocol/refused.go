package protocol

import (
	"errors"
	"fmt"
	"strings"

	"github.com/eclipse/paho.golang/autopaho"
)

// ErrRefused is what every *RefusedError unwraps to: the broker answered a
// CONNECT with a CONNACK that refused the connection.
var ErrRefused = errors.New("the broker refused the connection")

// RefusedError is a CONNACK that refused a connection attempt: its reason
// code (MQTT 5 §3.2.2.2) and the broker's reason string, if it sent one.
// It unwraps to ErrRefused.
type RefusedError struct {
	Code   byte   // the CONNACK reason code
	Reason string // the CONNACK's reason string; "" when none
	// The principal refused: the CONNECT's client id and user name ("" when
	// it sent none). Error leaves them out; callers name them as they like.
	ClientID, Username string
}

// refusalNames are the CONNACK reason codes of MQTT 5 §3.2.2.2 that refuse
// a connection, in the words of the specification.
var refusalNames = map[byte]string{
	0x80: "unspecified error",
	0x81: "malformed packet",
	0x82: "protocol error",
	0x83: "implementation specific error",
	0x84: "unsupported protocol version",
	0x85: "client identifier not valid",
	0x86: "bad user name or password",
	0x87: "not authorized",
	0x88: "server unavailable",
	0x89: "server busy",
	0x8A: "banned",
	0x8C: "bad authentication method",
	0x90: "topic name invalid",
	0x95: "packet too large",
	0x97: "quota exceeded",
	0x99: "payload format invalid",
	0x9A: "retain not supported",
	0x9B: "QoS not supported",
	0x9C: "use another server",
	0x9D: "server moved",
	0x9F: "connection rate exceeded",
}

func (e *RefusedError) Error() string {
	name := refusalNames[e.Code]
	if name == "" {
		name = "refused"
	}
	s := fmt.Sprintf("%v: %s (CONNACK reason code 0x%02X)", ErrRefused, name, e.Code)
	if e.Reason != "" && squash(e.Reason) != squash(name) { // not the code's name again, in other words
		s += ": " + e.Reason
	}
	return s
}

// squash folds case and drops spaces: "bad username or password" is the
// name of 0x86, "bad user name or password".
func squash(s string) string { return strings.ToLower(strings.ReplaceAll(s, " ", "")) }

// Unwrap returns ErrRefused.
func (e *RefusedError) Unwrap() error { return ErrRefused }

// Permanent reports whether trying again with the same credentials and
// client id cannot succeed: a bad client id (0x85), bad user name or
// password (0x86), not authorized (0x87), banned (0x8A) or a bad
// authentication method (0x8C). Only a change on the broker's side (a
// reloaded ACL) or of the credentials (a rotated password file or token)
// lets a later attempt through.
func (e *RefusedError) Permanent() bool {
	switch e.Code {
	case 0x85, 0x86, 0x87, 0x8A, 0x8C:
		return true
	}
	return false
}

// asRefusal turns autopaho's report of a failed connection attempt into a
// *RefusedError when the broker refused it in its CONNACK; nil otherwise.
func asRefusal(err error) *RefusedError {
	var ce *autopaho.ConnackError
	if !errors.As(err, &ce) {
		return nil
	}
	return &RefusedError{Code: ce.ReasonCode, Reason: ce.Reason}
}
