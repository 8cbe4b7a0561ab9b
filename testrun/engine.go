package testrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/clock"
	"github.com/ssrun/ssrun/host/rulefile"
	"github.com/ssrun/ssrun/inproc"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/store"
)

// An engine is what a case (or a replay) runs on: the real host, as
// `ssrun dev` and `ssrun run` run it (the same binding, permissions,
// reserved prefix, echo suppression, damping, leases, timers, resync,
// limits and defaults), connected through the store client
// (protocol.NewLocal) to a store in the same process (package store),
// both on a virtual clock. The host is serial (host.Config.Serial): one
// handler at a time, in the order their events were queued, and it says
// when it is idle, so a step runs until nothing is left and no test waits
// on the wall clock. Steps act from outside the host: a second client of
// the same store makes the writes, the virtual clock and the store's
// expiry move time, the host's connection goes down and up.

const (
	// testClientID is the client id of the host's connection: lock values
	// are "ssrun-test:<rule file>".
	testClientID = "ssrun-test"
	// outsideClientID is the client id of the steps' writes.
	outsideClientID = "ssrun-test-outside"
)

// engine is the host of one case or replay, and what it saw.
type engine struct {
	clock   *clock.Virtual
	store   *store.Store
	client  *protocol.Client // the host's connection
	outside *protocol.Client // the steps' writes
	h       *host.Host
	obs     *observed
	paths   map[string]string // rule file name -> path
	srcDir  string            // where a reload step's files are
	cancel  context.CancelFunc
}

// seeds holds the seed of each engine's host, for Rand.
var seeds sync.Map // *host.Host -> uint64

// newEngine starts a host on a fresh store at start: init seeds the store
// (through the outside client) before the rules load, then the rules
// load, one after the other, and what their start causes is handled.
// obs receives what the host does. The caller closes the engine, also
// when newEngine fails after the host started (e.h is then set).
func newEngine(ctx context.Context, start time.Time, seed uint64, rules []rule, runtimes []abi.Runtime, obs *observed,
	init func(ctx context.Context, c *protocol.Client) error) (e *engine, err error) {
	ctx, cancel := context.WithCancel(ctx)
	e = &engine{clock: clock.NewVirtual(start), obs: obs, paths: map[string]string{}, cancel: cancel}
	e.store = store.New(e.clock.Now, store.Quota{Keys: -1, Bytes: -1})
	srv := inproc.New(e.store)
	quietLog := slog.New(slog.DiscardHandler)
	if e.outside, err = protocol.NewLocal(ctx, protocol.Config{ClientID: outsideClientID, Now: e.clock.Now, Logger: quietLog}, srv); err != nil {
		return e, err
	}
	if init != nil {
		if err := init(ctx, e.outside); err != nil {
			return e, fmt.Errorf("store: %w", err)
		}
	}
	if e.client, err = protocol.NewLocal(ctx, protocol.Config{ClientID: testClientID, Now: e.clock.Now, Logger: quietLog}, srv); err != nil {
		return e, err
	}
	cfgs := map[string]host.RuleConfig{}
	for _, r := range rules {
		cfgs[r.name] = r.cfg
		e.paths[r.name] = r.path
	}
	e.h, err = host.New(host.Config{Store: e.client, Runtimes: runtimes, Logger: slog.New(obs), Rules: cfgs,
		Clock: e.clock, Serial: true, Recorder: obs})
	if err != nil {
		return e, err
	}
	seeds.Store(e.h, seed)
	if err := e.hold(ctx, func() error {
		for _, r := range rules {
			if err := e.h.Load(ctx, r.path); err != nil {
				return fmt.Errorf("starting %s: %w", r.name, err)
			}
		}
		return nil
	}); err != nil {
		return e, err
	}
	return e, nil
}

// close stops the host (releasing its rules' watches and locks, keeping
// their timers, as at shutdown) and the clients.
func (e *engine) close(ctx context.Context) error {
	var errs []error
	if e.h != nil {
		errs = append(errs, e.h.Close(ctx))
		seeds.Delete(e.h)
	}
	for _, c := range []*protocol.Client{e.client, e.outside} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	e.cancel()
	return errors.Join(errs...)
}

// hold runs f while no handler runs, then runs the host until it is idle:
// what f causes (the notifications of its writes, a rule's start) is
// handled in the order it happened.
func (e *engine) hold(ctx context.Context, f func() error) error {
	release, err := e.h.Hold(ctx)
	if err != nil {
		return err
	}
	ferr := f()
	release()
	return errors.Join(ferr, e.settle(ctx))
}

// settle runs the host until it is idle and nothing is due at the
// virtual clock's time: keys whose expiry is due are deleted, then the
// host's clock calls due run, one at a time, each handled before the next.
func (e *engine) settle(ctx context.Context) error {
	for {
		e.store.Expire()
		if err := e.h.WaitIdle(ctx); err != nil {
			return err
		}
		if !e.clock.Fire() {
			return nil
		}
	}
}

// next returns when the next thing happens on the virtual clock: a clock
// call of the host, or a key's expiry.
func (e *engine) next() (time.Time, bool) {
	at, ok := e.clock.Next()
	if exp, eok := e.store.Expire(); eok && (!ok || exp.Before(at)) {
		at, ok = exp, true
	}
	return at, ok
}

// advance moves the virtual clock to t, stopping at everything due on the
// way and running the host until it is idle at each stop.
func (e *engine) advance(ctx context.Context, t time.Time) error {
	for {
		if err := e.settle(ctx); err != nil {
			return err
		}
		at, ok := e.next()
		if !ok || at.After(t) {
			break
		}
		e.clock.Set(at)
	}
	e.clock.Set(t)
	return e.settle(ctx)
}

// advanceUntil moves the virtual clock from stop to stop (as advance does)
// until done holds, and fails if nothing is left to happen before it does.
func (e *engine) advanceUntil(ctx context.Context, done func() bool) error {
	for {
		if err := e.settle(ctx); err != nil {
			return err
		}
		if done() {
			return nil
		}
		at, ok := e.next()
		if !ok {
			return errors.New("nothing is left to happen on the clock")
		}
		e.clock.Set(at)
	}
}

// ms is the virtual clock in Unix ms.
func (e *engine) ms() int64 { return e.clock.Now().UnixMilli() }

// holder is the lock value of rule's leases.
func holder(rule string) string { return testClientID + ":" + rule }

// loseLock takes the lock name from the rule holding it, as another host
// taking over its lease in the store would (unless another host holds it
// already: a fence step), and runs the clock until the holder is told:
// its next renewal finds the key taken and it gets LOCK_LOST.
func (e *engine) loseLock(ctx context.Context, name string) error {
	l, ok := e.obs.lock(name)
	if !ok {
		return fmt.Errorf("lock %q is not held by any rule", name)
	}
	told := e.obs.lost(name)
	if err := e.hold(ctx, func() error {
		res, err := e.outside.Get(ctx, []byte(name), protocol.CallOptions{})
		if err != nil || res.Found && string(res.Value) != holder(l.rule) {
			return err // another host holds it already
		}
		_, err = e.outside.Set(ctx, []byte(name), []byte("another-host:lose_lock"), protocol.SetOptions{Expiry: l.ttl})
		return err
	}); err != nil {
		return err
	}
	if err := e.advanceUntil(ctx, func() bool { return e.obs.lost(name) > told }); err != nil {
		return fmt.Errorf("lock %q of %s: its holder was not told: %w", name, l.rule, err)
	}
	return nil
}

// fence gives the lock name to another host behind its holder's back, as
// when the holder paused past its lease and a standby took over: another
// client takes the lock's key (a newer fencing token) and writes, fenced
// with it, the keys the holder wrote fenced with the lock, unchanged. The
// store then refuses the holder's next fenced write to them with FENCED.
// The holder is not told until its next renewal finds the key taken.
func (e *engine) fence(ctx context.Context, name string) error {
	l, ok := e.obs.lock(name)
	if !ok {
		return fmt.Errorf("lock %q is not held by any rule", name)
	}
	return e.hold(ctx, func() error {
		res, err := e.outside.Get(ctx, []byte(name), protocol.CallOptions{})
		if err != nil {
			return err
		}
		if !res.Found || string(res.Value) != holder(l.rule) {
			return fmt.Errorf("lock %q is not held by any rule", name)
		}
		taken, err := e.outside.Set(ctx, []byte(name), []byte("another-host:fence"), protocol.SetOptions{})
		if err != nil {
			return err
		}
		for _, k := range e.obs.fencedWith(name) {
			res, err := e.outside.Get(ctx, []byte(k), protocol.CallOptions{})
			if err != nil {
				return err
			}
			if res.Found {
				if _, err := e.outside.Set(ctx, []byte(k), res.Value, protocol.SetOptions{FencingToken: taken.Version}); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

// reload writes the content of the file src over the rule file name (a
// case's copy) and loads it, as ssrun dev does when a rule file changes.
func (e *engine) reload(ctx context.Context, name, src string) error {
	path, ok := e.paths[name]
	if !ok {
		return fmt.Errorf("reload: no rule %q in the case", name)
	}
	b, err := rulefile.Read(src)
	if err != nil {
		return fmt.Errorf("reload %s: %w", name, err)
	}
	info, err := os.Stat(path)
	if err == nil {
		err = os.WriteFile(path, b, info.Mode().Perm())
	}
	if err != nil {
		return fmt.Errorf("reload %s: %w", name, err)
	}
	return e.h.Load(ctx, path)
}

// value reads key from the store as a client does.
func (e *engine) value(ctx context.Context, key string) ([]byte, bool, error) {
	res, err := e.outside.Get(ctx, []byte(key), protocol.CallOptions{})
	return res.Value, res.Found, err
}

// status returns the status of the rule file name.
func (e *engine) status(name string) (host.RuleStatus, bool) {
	for _, s := range e.h.Status() {
		if filepath.Base(s.Path) == name {
			return s, true
		}
	}
	return host.RuleStatus{}, false
}
