package group

import (
	"context"
	"log/slog"
	"time"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/watch"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// What a group needs of its host, which host/grouphost.go gives it: the
// host's store client, watches, leases, pattern hub, clock, and the host
// itself (its rule files, and loading and stopping them).

// Deps are the host's parts a group uses, given to New.
type Deps struct {
	// Prefix is the host's reserved prefix (host.ReservedPrefix): the
	// group's keys are under Prefix + "group/" + its name, and a doorbell
	// takes no key under it.
	Prefix string
	Store  Store        // the host's client
	Log    *slog.Logger // the host's logger
	Reg    Watches      // the host's watch registry
	Clock  clock.Clock  // the host's clock, for the loop's renewal interval
	Quiet  *serial.Quiet
	// Leases are the group's own: its member, roster lock and ownership
	// leases, held by the holder "<client id>:$group".
	Leases Leases
	Hub    Hub  // the host's pattern hub, for the pattern hints (hints.go)
	Host   Host // the host (see Host)
}

// Store is what a group calls of the state store: the host's client.
type Store interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
	Del(ctx context.Context, key []byte, opts protocol.DelOptions) (int64, error)
	// ClientID names the host's connection: its member id.
	ClientID() string
}

// Watches is what a group uses of the watch registry (*watch.Registry):
// it watches its roster, the leases it waits for, its doorbell and the
// other members' patterns.
type Watches interface {
	Watch(ctx context.Context, w watch.Watcher, key string) error
	Unwatch(ctx context.Context, w watch.Watcher, key string)
	WatchRead(ctx context.Context, w watch.Watcher, key string) (res protocol.GetResult, read bool, err error)
}

var _ Watches = (*watch.Registry)(nil)

// Leases are the group's leases: the lease code a rule's locks use
// (host/locks.go), with its timing argument and renewal.
type Leases interface {
	// Lock takes (or returns) the lease name, waiting up to wait for
	// another holder to let go (abi.StatusBusy when it does not).
	Lock(ctx context.Context, name string, ttl, wait time.Duration) (string, error)
	// Unlock releases the lease name (abi.StatusNotFound when not held).
	Unlock(ctx context.Context, name string) error
	// Holds reports whether the lease name is held and not lost.
	Holds(name string) bool
	// FenceToken returns the token of a write of key fenced with the lease
	// name, or LOCK_LOST when it is not held for certain.
	FenceToken(verb, key, name string) (hlc.HLC, error)
	// Renew renews the held lease name at once, and returns its new token;
	// false when it is not held for certain or the renewal failed (a
	// renewal that finds another holder loses the lease).
	Renew(ctx context.Context, name string) (hlc.HLC, bool)
	// LostSignal is signalled when a lease is lost; TakeLost returns the
	// names of the leases lost since its last call.
	LostSignal() <-chan struct{}
	TakeLost() []string
	// ReleaseAll releases every lease and waits for their renewals to end.
	ReleaseAll(ctx context.Context)
}

// Hub is what the pattern hints use of the host's pattern hub.
type Hub interface {
	// PatternList returns the patterns the host's rules watch, sorted.
	PatternList() []string
	// Rang is told of a key another member's rule wrote that matches a
	// pattern of this host's rules (its doorbell rang).
	Rang(key string)
}

// Host is what a group needs of its host (host/grouphost.go).
type Host interface {
	// Shares reports whether the group shares the rule file at path (not
	// every-host).
	Shares(path string) bool
	// LoadOwned loads a rule file just taken over; Unload stops one handed
	// over or lost, keeping its timers.
	LoadOwned(ctx context.Context, path string) error
	Unload(ctx context.Context, path string) error
	// RuleAt returns the rule loaded from path, or nil.
	RuleAt(path string) Rule
	// ContentHash names the content of the rule file at path in a rule set
	// ("" when it cannot be read).
	ContentHash(path string) string
	// LoadFailure returns the content hash (as ContentHash names it) and
	// the error of the last load of the rule file at path, when it failed
	// and no version of the rule runs; ForgetFailure drops it (the file
	// changed while another host runs the rule: its new content has not
	// failed).
	LoadFailure(path string) (hash, err string, ok bool)
	ForgetFailure(path string)
}

// Rule is a rule a group's host runs, as a new owner resyncs it.
type Rule interface {
	// WatchedKeys returns the keys the rule watches.
	WatchedKeys() []string
	// Enqueue delivers an event to the rule's mailbox.
	Enqueue(mailbox.Delivery)
}
