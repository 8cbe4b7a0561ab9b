package host

import (
	"context"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Store is the host's port to the state store: the calls its rules'
// verbs, leases, timers, watch registry and group make, and the
// connection's single event stream (which only the Host reads).
// *protocol.Client satisfies it, whether connected to a broker over MQTT
// (protocol.New) or to a store in the same process (protocol.NewLocal with
// package inproc, as ssrun test, replay and dry runs use).
type Store interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
	Del(ctx context.Context, key []byte, opts protocol.DelOptions) (int64, error)
	VDel(ctx context.Context, key, value []byte, opts protocol.DelOptions) (int64, error)
	KeyNotify(ctx context.Context, key []byte, opts protocol.CallOptions) error
	KeyNotifyStop(ctx context.Context, key []byte, opts protocol.CallOptions) (bool, error)
	// Events is the connection's event stream: notifications and
	// connection changes, in order.
	Events() <-chan protocol.Event
	// Now is the client's hybrid logical clock (protocol.Client.Now).
	Now() hlc.HLC
	// ClientID names the host's connection (its writes' __srcId).
	ClientID() string
	// MaxPacketSize is the largest request the store takes, once
	// connected (protocol.Client.MaxPacketSize).
	MaxPacketSize() (size int, ok bool)
}

var _ Store = (*protocol.Client)(nil)

// eventCounter is a Store that counts the events it has queued on its
// Events stream (*protocol.Client): a serial host (Config.Serial) compares
// the count with the events it has handled, to know none is in flight.
type eventCounter interface{ EventsQueued() uint64 }

var _ eventCounter = (*protocol.Client)(nil)
