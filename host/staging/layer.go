package staging

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/inproc"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/store"
)

// layer is a copy-on-write layer over a Store: the Store a dry run and a
// canary's shadow write to (dryrun.go). Its writes go to a store of package
// store in this process (the engine: the state store's own conditions,
// versions, fencing and expiry), through a client of it (protocol.NewLocal
// and package inproc), never to the real store. Before the first write of
// a key, the layer copies the key from the real store, its value and
// version or its absence (store.Seed, store.Forget), so that the write
// meets what the real store holds; from then on the layer holds the key:
// reads of it see the staged writes, and changes the real store makes to
// it are no longer seen. Reads of the keys it does not hold go to the real
// store, each time, as do watches, the event stream and the clock: a key a
// dry run only reads stays live. Keys under private are the layer's from
// the start, never read from nor written to the real store (a dry run's
// timers). Staged writes notify no one: nothing registers on the engine.
type layer struct {
	real    realStore
	eng     *store.Store
	local   *protocol.Client // of eng
	private string

	hmu  sync.Mutex // one copy at a time, so that a key is copied once
	mu   sync.Mutex
	held map[string]bool // the keys copied into eng
}

var _ StagedStore = (*layer)(nil)

// realStore is what a layer reads of the real store (the host's Store).
type realStore interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	ClientID() string
}

// StagedStore is the store calls a write makes: on the real store (the
// host's Store), or on a layer.
type StagedStore interface {
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
	Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error)
	Del(ctx context.Context, key []byte, opts protocol.DelOptions) (int64, error)
	VDel(ctx context.Context, key, value []byte, opts protocol.DelOptions) (int64, error)
}

// newLayer returns a layer over real whose engine and client run on nowMs
// (Unix ms). Close it to stop its client.
func newLayer(real realStore, nowMs func() int64, private string, log *slog.Logger) (*layer, error) {
	now := func() time.Time { return time.UnixMilli(nowMs()) }
	eng := store.New(now, store.Quota{Keys: -1, Bytes: -1})
	local, err := protocol.NewLocal(context.Background(), protocol.Config{ClientID: real.ClientID(), Now: now, Logger: log}, inproc.New(eng))
	if err != nil {
		return nil, fmt.Errorf("a store in process for staged writes: %w", err)
	}
	return &layer{real: real, eng: eng, local: local, private: private, held: map[string]bool{}}, nil
}

// Close stops the layer's client; the layer's writes fail afterwards.
func (l *layer) Close() error { return l.local.Close() }

// holds reports whether key is the layer's: copied, or private.
func (l *layer) holds(key string) bool {
	if l.private != "" && strings.HasPrefix(key, l.private) {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[key]
}

// hold copies key from the real store into the engine, unless the layer
// holds it already.
func (l *layer) hold(ctx context.Context, key []byte) error {
	if l.holds(string(key)) {
		return nil
	}
	l.hmu.Lock()
	defer l.hmu.Unlock()
	if l.holds(string(key)) {
		return nil
	}
	res, err := l.real.Get(ctx, key, protocol.CallOptions{})
	if err != nil {
		return fmt.Errorf("read the key to stage a write over it: %w", err)
	}
	if res.Found {
		err = l.eng.Seed(key, res.Value, res.Version)
	} else {
		err = l.eng.Forget(key)
	}
	if err != nil {
		return fmt.Errorf("copy the key to stage a write over it: %w", err)
	}
	l.mu.Lock()
	l.held[string(key)] = true
	l.mu.Unlock()
	return nil
}

// Drop forgets the copied keys but those keep reports: reads of them reach
// the real store again, and their next write copies them anew.
func (l *layer) Drop(keep func(key string) bool) {
	l.hmu.Lock()
	defer l.hmu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k := range l.held {
		if !keep(k) {
			delete(l.held, k)
			_ = l.eng.Forget([]byte(k)) // a store in memory: it always forgets
		}
	}
}

// Get implements Store: the staged key, or the real one.
func (l *layer) Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error) {
	if l.holds(string(key)) {
		return l.local.Get(ctx, key, opts)
	}
	return l.real.Get(ctx, key, opts)
}

// Set implements Store: staged.
func (l *layer) Set(ctx context.Context, key, value []byte, opts protocol.SetOptions) (protocol.SetResult, error) {
	if err := l.hold(ctx, key); err != nil {
		return protocol.SetResult{}, err
	}
	return l.local.Set(ctx, key, value, opts)
}

// Del implements Store: staged.
func (l *layer) Del(ctx context.Context, key []byte, opts protocol.DelOptions) (int64, error) {
	if err := l.hold(ctx, key); err != nil {
		return 0, err
	}
	return l.local.Del(ctx, key, opts)
}

// VDel implements Store: staged.
func (l *layer) VDel(ctx context.Context, key, value []byte, opts protocol.DelOptions) (int64, error) {
	if err := l.hold(ctx, key); err != nil {
		return 0, err
	}
	return l.local.VDel(ctx, key, value, opts)
}

// Keys returns the keys a listing of the real store found (sorted, as
// SCAN lists them), as the layer sees them: with the keys it holds that
// match (match) and are present in it added, and those it holds that are
// absent (a staged delete) taken out; sorted. A key the layer holds is in
// the result only if present in the layer, whatever the real store has.
func (l *layer) Keys(ctx context.Context, real []string, match func(key string) bool) ([]string, error) {
	l.mu.Lock()
	var held []string
	for k := range l.held {
		if match(k) {
			held = append(held, k)
		}
	}
	l.mu.Unlock()
	if len(held) == 0 {
		return real, nil
	}
	present := make(map[string]bool, len(held))
	for _, k := range held {
		res, err := l.local.Get(ctx, []byte(k), protocol.CallOptions{})
		if err != nil {
			return nil, fmt.Errorf("read the staged key %q: %w", k, err)
		}
		present[k] = res.Found
	}
	out := make([]string, 0, len(real)+len(held))
	for _, k := range real {
		if p, ok := present[k]; !ok || p {
			out = append(out, k)
		}
		delete(present, k)
	}
	for k, p := range present {
		if p {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}
