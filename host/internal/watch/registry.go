// Package watch is the host's watch registry: one KEYNOTIFY per key however
// many rules watch it, a key's changes handed to its watchers in name order,
// and the resync of watched keys after a reconnect.
package watch

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/mailbox"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Registry multiplexes watches: one KEYNOTIFY per key however many rules (and
// lock waiters) need it, a KEYNOTIFY STOP when the last one leaves, and the
// last known state of every watched key so a reconnect can tell what changed.
type Registry struct {
	client Store
	log    *slog.Logger

	// opMu is read-held by acquire and release, which serialise the
	// round trips (KEYNOTIFY, its baseline read, STOP) of one key on that
	// key's op lock, so that registrations of different keys overlap (many
	// rules loading at once); resync holds it, alone.
	opMu sync.RWMutex

	mu   sync.Mutex
	keys map[string]*keyState
	ops  map[string]*keyOp // by key, while an acquire or release of it runs
}

// keyOp serialises acquire and release of one key: a second watcher of a
// key waits until the first one's KEYNOTIFY is answered.
type keyOp struct {
	mu   sync.Mutex
	refs int // goroutines holding or waiting for mu; guarded by registry.mu
}

// Watcher is what the registry hands a key's changes to: a rule. The
// watchers of a key get each change in the order of their names, so that
// a serial host's order (internal/serial) does not depend on a map's.
type Watcher interface {
	Enqueue(mailbox.Delivery)
	WatcherName() string
}

// byName sorts watchers by name (in place) and returns them.
func byName(ws []Watcher) []Watcher {
	if len(ws) > 1 {
		slices.SortFunc(ws, func(a, b Watcher) int { return strings.Compare(a.WatcherName(), b.WatcherName()) })
	}
	return ws
}

type keyState struct {
	watchers map[Watcher]bool
	waiters  int       // lock waits holding the key
	wake     []*func() // called on every DELETE (lock waits)
	// registered is false while a KEYNOTIFY is owed (it failed because the
	// store was offline); the next connection sends it.
	registered bool
	// Last known state, for resync after a reconnect.
	known   bool
	present bool
	version hlc.HLC
	// read is set while the known state comes from a read at registration
	// (baseline), not from a change delivered to the watchers: a
	// notification of that version (a write made between the KEYNOTIFY and
	// the read) has not been delivered yet, and is.
	read bool
	gen  uint64 // bumped by every notification
}

// Store is what the registry calls of the host's store port (host.Store).
type Store interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	KeyNotify(ctx context.Context, key []byte, opts protocol.CallOptions) error
	KeyNotifyStop(ctx context.Context, key []byte, opts protocol.CallOptions) (bool, error)
}

func New(client Store, log *slog.Logger) *Registry {
	return &Registry{client: client, log: log, keys: map[string]*keyState{}, ops: map[string]*keyOp{}}
}

// lockKey takes opMu for reading and key's op lock, and returns the
// function that releases both.
func (g *Registry) lockKey(key string) (unlock func()) {
	g.opMu.RLock()
	g.mu.Lock()
	op := g.ops[key]
	if op == nil {
		op = &keyOp{}
		g.ops[key] = op
	}
	op.refs++
	g.mu.Unlock()
	op.mu.Lock()
	return func() {
		op.mu.Unlock()
		g.mu.Lock()
		if op.refs--; op.refs == 0 {
			delete(g.ops, key)
		}
		g.mu.Unlock()
		g.opMu.RUnlock()
	}
}

func (ks *keyState) users() int { return len(ks.watchers) + ks.waiters }

// Watch adds w as a watcher of key, registering the key with the store when
// it is the first user. A store that is offline is not an error: the
// KEYNOTIFY is sent when the connection comes back.
func (g *Registry) Watch(ctx context.Context, w Watcher, key string) error {
	return g.acquire(ctx, key, func(ks *keyState) { ks.watchers[w] = true })
}

// Unwatch removes w as a watcher of key; STOP when nobody is left.
func (g *Registry) Unwatch(ctx context.Context, w Watcher, key string) {
	g.release(ctx, key, func(ks *keyState) { delete(ks.watchers, w) })
}

// WaitDelete holds key registered for a lock wait, calling wake (which
// must not block) on each DELETE of the key (or a resync that finds it
// gone), and returns a release function.
func (g *Registry) WaitDelete(ctx context.Context, key string, wake func()) (func(), error) {
	w := &wake
	err := g.acquire(ctx, key, func(ks *keyState) {
		ks.waiters++
		ks.wake = append(ks.wake, w)
	})
	if err != nil {
		return nil, err
	}
	release := func() {
		g.release(context.WithoutCancel(ctx), key, func(ks *keyState) {
			ks.waiters--
			for i, c := range ks.wake {
				if c == w {
					ks.wake = append(ks.wake[:i], ks.wake[i+1:]...)
					break
				}
			}
		})
	}
	return release, nil
}

func (g *Registry) acquire(ctx context.Context, key string, add func(*keyState)) error {
	_, _, err := g.acquireRead(ctx, key, add, g.baseline)
	return err
}

// WatchRead is Watch, which also returns the read of the key it made when
// it registered the key (read true: the key's state once registered); a
// key registered before is not read. A rule's pattern watch gives the rule
// that state (host/internal/patternwatch).
func (g *Registry) WatchRead(ctx context.Context, w Watcher, key string) (res protocol.GetResult, read bool, err error) {
	return g.acquireRead(ctx, key, func(ks *keyState) { ks.watchers[w] = true }, g.baseline)
}

// WatchKnown is Watch for a key whose state the caller knows already:
// known is what a write of this host stored, its value and the version of
// the store's reply. A first registration takes known as the key's
// baseline instead of reading it, which saves a round trip. known can be
// stale by a write another client made between that write and the
// KEYNOTIFY: the caller reads the key once it has used known (as
// host/internal/patternwatch does), so no change is missed.
func (g *Registry) WatchKnown(ctx context.Context, w Watcher, key string, known protocol.GetResult) error {
	_, _, err := g.acquireRead(ctx, key, func(ks *keyState) { ks.watchers[w] = true },
		func(_ context.Context, _ string, ks *keyState) (protocol.GetResult, bool) {
			g.mu.Lock()
			defer g.mu.Unlock()
			if !ks.known {
				ks.known, ks.present, ks.version, ks.read = true, known.Found, known.Version, true
			}
			return known, true
		})
	return err
}

// acquireRead is acquire, which also returns the key's baseline when it
// registered it (read true), as base gives it; a key registered before has
// none.
func (g *Registry) acquireRead(ctx context.Context, key string, add func(*keyState),
	base func(context.Context, string, *keyState) (protocol.GetResult, bool)) (res protocol.GetResult, read bool, err error) {
	defer g.lockKey(key)()
	g.mu.Lock()
	ks := g.keys[key]
	if ks == nil {
		ks = &keyState{watchers: map[Watcher]bool{}}
		g.keys[key] = ks
	}
	first := ks.users() == 0
	add(ks)
	g.mu.Unlock()
	if !first {
		return res, false, nil
	}
	err = g.client.KeyNotify(ctx, []byte(key), protocol.CallOptions{})
	switch {
	case err == nil:
		g.mu.Lock()
		ks.registered = true
		g.mu.Unlock()
		res, read = base(ctx, key, ks)
		return res, read, nil
	case errors.Is(err, protocol.ErrNotConnected):
		g.log.Debug("store offline; watch registered when it reconnects", "key", key)
		return res, false, nil
	default:
		g.mu.Lock()
		delete(g.keys, key)
		g.mu.Unlock()
		return res, false, err
	}
}

// baseline reads the key's current version so that a later reconnect can
// tell whether it changed while offline, and returns the read (ok false
// when it failed).
func (g *Registry) baseline(ctx context.Context, key string, ks *keyState) (protocol.GetResult, bool) {
	g.mu.Lock()
	gen := ks.gen
	g.mu.Unlock()
	res, err := g.client.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		return res, false // unknown baseline: a reconnect then reports the key if present
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if ks.gen == gen && !ks.known {
		ks.known, ks.present, ks.version, ks.read = true, res.Found, res.Version, true
	}
	return res, true
}

func (g *Registry) release(ctx context.Context, key string, remove func(*keyState)) {
	defer g.lockKey(key)()
	g.mu.Lock()
	ks := g.keys[key]
	if ks == nil {
		g.mu.Unlock()
		return
	}
	remove(ks)
	last := ks.users() == 0
	registered := ks.registered
	if last {
		delete(g.keys, key)
	}
	g.mu.Unlock()
	if last && registered {
		if _, err := g.client.KeyNotifyStop(ctx, []byte(key), protocol.CallOptions{}); err != nil && !errors.Is(err, protocol.ErrNotConnected) {
			g.log.Warn("keynotify stop failed", "key", key, "err", err)
		}
	}
}

// Notify records a notification and returns the watchers of its key.
func (g *Registry) Notify(ev protocol.Event, buf []Watcher) []Watcher {
	g.mu.Lock()
	defer g.mu.Unlock()
	ks := g.keys[string(ev.Key)]
	if ks == nil {
		return buf
	}
	present := ev.Op != string(abi.OpDelete)
	if ks.known && !ks.read && ks.present == present && ks.version == ev.Version {
		return buf // already delivered by a resync that read this version
	}
	ks.gen++
	ks.known, ks.present, ks.version, ks.read = true, present, ev.Version, false
	if !ks.present {
		ks.signal()
	}
	n := len(buf)
	for w := range ks.watchers {
		buf = append(buf, w)
	}
	byName(buf[n:])
	return buf
}

func (ks *keyState) signal() {
	for _, w := range ks.wake {
		(*w)()
	}
}

// Resync runs when a connection comes up: it sends any KEYNOTIFY still owed
// and re-reads those keys, or (all, after an outage) every watched key, and
// returns a resync event for each key whose state differs from the last one
// known, with the watchers to deliver it to. A key notified while it was being
// re-read is skipped: the notification is newer.
func (g *Registry) Resync(ctx context.Context, all bool) []resyncEvent {
	g.opMu.Lock()
	defer g.opMu.Unlock()
	g.mu.Lock()
	keys := make([]string, 0, len(g.keys))
	for k := range g.keys {
		keys = append(keys, k)
	}
	g.mu.Unlock()
	slices.Sort(keys) // a fixed order: internal/serial
	var out []resyncEvent
	for _, key := range keys {
		g.mu.Lock()
		ks := g.keys[key]
		if ks == nil {
			g.mu.Unlock()
			continue
		}
		gen, registered := ks.gen, ks.registered
		g.mu.Unlock()
		if registered && !all {
			continue
		}
		if !registered {
			if err := g.client.KeyNotify(ctx, []byte(key), protocol.CallOptions{}); err != nil {
				g.log.Warn("re-registering watch failed", "key", key, "err", err)
				continue
			}
			g.mu.Lock()
			ks.registered = true
			g.mu.Unlock()
		}
		res, err := g.client.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil {
			g.log.Warn("re-reading watched key failed", "key", key, "err", err)
			continue
		}
		g.mu.Lock()
		if g.keys[key] != ks || ks.gen != gen {
			g.mu.Unlock()
			continue
		}
		changed := res.Found != ks.present || (res.Found && res.Version != ks.version)
		if !ks.known {
			changed = res.Found
		}
		ks.known, ks.present, ks.version = true, res.Found, res.Version
		if !changed {
			g.mu.Unlock()
			continue
		}
		ks.gen++
		ks.read = false // delivered below
		ev := abi.Event{Key: key, Op: abi.OpDelete, Resync: true}
		if res.Found {
			ev.Op, ev.Value, ev.Version = abi.OpSet, res.Value, res.Version.String()
		}
		re := resyncEvent{Ev: ev}
		for w := range ks.watchers {
			re.To = append(re.To, w)
		}
		byName(re.To)
		if !res.Found {
			ks.signal()
		}
		g.mu.Unlock()
		out = append(out, re)
	}
	return out
}

type resyncEvent struct {
	Ev abi.Event
	To []Watcher
}

// WatchedKeys returns how many keys are registered (for stats and tests).
func (g *Registry) WatchedKeys() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.keys)
}

// Pause holds every watch and unwatch (they wait in acquire) until resume
// is called: the host's tests stop a rule's swap in the registry with it.
func (g *Registry) Pause() (resume func()) {
	g.opMu.Lock()
	return g.opMu.Unlock
}
