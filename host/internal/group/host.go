package group

import (
	"context"
	"log/slog"

	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/internal/lease"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/host/internal/serial"
	"github.com/ssrun/ssrun/host/internal/watch"
	"github.com/ssrun/ssrun/protocol"
)

// What a group needs of its host, which host/grouphost.go gives it: the
// host's store client, watches, pattern hub, clock, the group's leases, and
// the host itself (its rule files, and loading and stopping them).

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
	// leases, held by the holder "<client id>:$group" (the lease code a
	// rule's locks use, with its timing argument and renewal).
	Leases *lease.Leases
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
