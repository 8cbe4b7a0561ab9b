// Package wire holds the constants of the state store wire protocol
// (statestore-protocol.md §1–§4, §8) that both ends need: topics, MQTT user
// property names, status codes and the exact error texts. It has no logic
// beyond topic formatting and parsing, so the client (package protocol) and the
// embedded server (package broker) share one spelling of every string.
package wire

import (
	"encoding/hex"
	"strings"
)

// ServiceGUID is the fixed upper-case GUID segment of the state store topics.
const ServiceGUID = "FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8"

// RequestTopic is where every command is published (§1).
const RequestTopic = "statestore/v1/" + ServiceGUID + "/command/invoke"

// notifyPrefix starts every notification topic; response topics under it are
// forbidden (§1).
const notifyPrefix = "clients/statestore/v1/" + ServiceGUID

// ContentType is the content type of requests, responses and notifications.
const ContentType = "application/octet-stream"

// ProtocolVersion is the only protocol version sent (§3).
const ProtocolVersion = "1.0"

// User property names (§2, §3).
const (
	PropTimestamp    = "__ts"
	PropFencingToken = "__ft"
	PropProtVer      = "__protVer"
	PropSourceID     = "__srcId"
	PropStatus       = "__stat"
	PropStatusMsg    = "__stMsg"
	PropName         = "__propName"
	PropValue        = "__propVal"
	PropAppErr       = "__apErr"
	PropRequestVer   = "__requestProtVer"
	PropSupportedVer = "__supProtMajVer"
	PropPartition    = "$partition"
	PropHighPriority = "$high_priority"
	PropPersistence  = "aio-persistence"
)

// RPC status codes carried in __stat (§3).
const (
	StatusOK                 = "200"
	StatusBadRequest         = "400"
	StatusUnsupportedVersion = "505"
	SupportedMajorVersions   = "1"
)

// Exact error texts (§8). A reply carries them as `-ERR <text>\r\n` under
// status 200.
const (
	ErrTextTimestampSkew       = "the request timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"
	ErrTextMissingFencingToken = "a fencing token is required for this request"
	ErrTextFencingTokenSkew    = "the request fencing token timestamp is too far in the future; ensure that the client and broker system clocks are synchronized"
	ErrTextFencingTokenLower   = "the request fencing token is a lower version than the fencing token protecting the resource"
	ErrTextQuotaExceeded       = "the quota has been exceeded"
	ErrTextSyntax              = "syntax error"
	ErrTextNotAuthorized       = "not authorized"
	ErrTextUnknownCommand      = "unknown command"
	ErrTextWrongNumberOfArgs   = "wrong number of arguments"
	ErrTextTimestampMissing    = "missing timestamp"
	ErrTextTimestampMalformed  = "malformed timestamp"
	ErrTextKeyLengthZero       = "the key length is zero"
)

// Hex is the upper-case base16 of b, as used for client ids and keys in
// notification topics.
func Hex(b []byte) string { return strings.ToUpper(hex.EncodeToString(b)) }

// NotifyTopic is the topic of a notification for key to clientID (§1).
func NotifyTopic(clientID string, key []byte) string {
	return notifyPrefix + "/" + Hex([]byte(clientID)) + "/command/notify/" + Hex(key)
}

// NotifyFilter is the subscription filter matching every notification for
// clientID.
func NotifyFilter(clientID string) string {
	return notifyPrefix + "/" + Hex([]byte(clientID)) + "/command/notify/+"
}

// ParseNotifyTopic returns the key of a notification topic addressed to
// clientID. Either hex case is accepted.
func ParseNotifyTopic(clientID, topic string) (key []byte, ok bool) {
	prefix := notifyPrefix + "/" + Hex([]byte(clientID)) + "/command/notify/"
	if !strings.HasPrefix(topic, prefix) {
		return nil, false
	}
	key, err := hex.DecodeString(topic[len(prefix):])
	if err != nil || len(key) == 0 {
		return nil, false
	}
	return key, true
}

// ResponseTopic is the response topic ssrun's client uses, the Go SDK's shape:
// `clients/<HEX(clientId)>/statestore/v1/<GUID>/command/invoke/response`.
func ResponseTopic(clientID string) string {
	return "clients/" + Hex([]byte(clientID)) + "/" + RequestTopic + "/response"
}

// ForbiddenResponseTopic reports whether a response topic is one the service
// refuses: the request topic itself or anything in the notification space.
func ForbiddenResponseTopic(topic string) bool {
	return topic == RequestTopic || strings.HasPrefix(topic, notifyPrefix)
}
