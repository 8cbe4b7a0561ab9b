// Package wire is what both ends of a plugin connection share: the go-plugin
// handshake and plugin name, and the conversions between ABI values and
// their protobuf messages (package pluginv1).
package wire

import (
	"math"
	"time"

	goplugin "github.com/hashicorp/go-plugin"

	"github.com/ssrun/ssrun/abi"
	pb "github.com/ssrun/ssrun/runtime/plugin/proto/ssrun/plugin/v1"
)

// Handshake is the go-plugin handshake of ssrun plugins: the magic cookie
// keeps a plugin from being run by hand, and the protocol version is the ABI
// version.
var Handshake = goplugin.HandshakeConfig{
	ProtocolVersion:  abi.Version,
	MagicCookieKey:   "SSRUN_PLUGIN",
	MagicCookieValue: "ssrun-rule-plugin-5b0c7e1e",
}

// PluginName is the go-plugin name under which a plugin serves the Rule
// service.
const PluginName = "rule"

// Millis converts d to whole milliseconds, rounding away from zero so that
// a positive duration never becomes zero (which means "none").
func Millis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	switch {
	case d > 0 && d%time.Millisecond != 0:
		ms++
	case d < 0 && d%time.Millisecond != 0:
		ms--
	}
	return ms
}

// Duration converts milliseconds to a Duration; false when ms is negative
// or too large for a Duration.
func Duration(ms int64) (time.Duration, bool) {
	if ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) {
		return 0, false
	}
	return time.Duration(ms) * time.Millisecond, true
}

// Result is the message of err: status OK for nil, otherwise its abi.Status
// (see abi.StatusOf) and message.
func Result(err error) *pb.Result {
	if err == nil {
		return &pb.Result{}
	}
	return &pb.Result{Status: int32(abi.StatusOf(err)), Message: []byte(err.Error())}
}

// Err is the error of a Result: nil when OK (or absent), otherwise an
// *abi.Error with its status and message.
func Err(r *pb.Result) error {
	if r.GetStatus() == int32(abi.StatusOK) {
		return nil
	}
	return &abi.Error{Status: abi.Status(r.GetStatus()), Msg: string(r.GetMessage())}
}

var ops = map[abi.Op]pb.Op{abi.OpSet: pb.Op_OP_SET, abi.OpDelete: pb.Op_OP_DELETE, abi.OpLockLost: pb.Op_OP_LOCK_LOST, abi.OpTimer: pb.Op_OP_TIMER}

// EventToPB converts ev; false when its op is not one of abi's.
func EventToPB(ev abi.Event) (*pb.Event, bool) {
	op, ok := ops[ev.Op]
	if !ok {
		return nil, false
	}
	return &pb.Event{Key: []byte(ev.Key), Op: op, Value: ev.Value, Version: []byte(ev.Version), Resync: ev.Resync,
		DeadlineMs: ev.Deadline, Late: ev.Late, Coalesced: uint32(min(max(ev.Coalesced, 0), math.MaxUint32))}, true
}

// EventFromPB converts e. The value of a SET or TIMER is never nil (an
// empty value or payload is distinct from none); other ops have a nil
// value. An op this version does not know keeps its protobuf name (or
// number) as text.
func EventFromPB(e *pb.Event) abi.Event {
	ev := abi.Event{Key: string(e.GetKey()), Version: string(e.GetVersion()), Resync: e.GetResync(),
		Deadline: e.GetDeadlineMs(), Late: e.GetLate(), Coalesced: int(e.GetCoalesced())}
	switch e.GetOp() {
	case pb.Op_OP_SET:
		ev.Op, ev.Value = abi.OpSet, NonNil(e.GetValue())
	case pb.Op_OP_TIMER:
		ev.Op, ev.Value = abi.OpTimer, NonNil(e.GetValue())
	case pb.Op_OP_DELETE:
		ev.Op = abi.OpDelete
	case pb.Op_OP_LOCK_LOST:
		ev.Op = abi.OpLockLost
	default:
		ev.Op = abi.Op(e.GetOp().String())
	}
	return ev
}

// NonNil returns b, or an empty slice for nil: protobuf decodes an empty
// bytes field as nil, and an empty value is not no value.
func NonNil(b []byte) []byte {
	if b == nil {
		return []byte{}
	}
	return b
}
