package staging

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/inproc"
	"github.com/ssrun/ssrun/inproc/inproctest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/store"
)

// layerWorld is a layer over a real store in process, both on a clock the
// test moves, and a second client of the real store (another writer).
type layerWorld struct {
	t     *testing.T
	ms    atomic.Int64
	real  *protocol.Client // the host's connection to the real store
	other *protocol.Client
	l     *layer
}

func newLayerWorld(t *testing.T) *layerWorld {
	t.Helper()
	w := &layerWorld{t: t}
	w.ms.Store(1_700_000_000_000)
	now := func() time.Time { return time.UnixMilli(w.ms.Load()) }
	srv := inproc.New(store.New(now, store.Quota{Keys: -1, Bytes: -1}))
	quiet := slog.New(slog.DiscardHandler)
	dial := func(id string) *protocol.Client { return inproctest.Client(t, srv, id, now) }
	w.real, w.other = dial("host"), dial("other")
	l, err := newLayer(w.real, w.ms.Load, timers.ReservedPrefix, quiet)
	if err != nil {
		t.Fatal(err)
	}
	testutil.CloseAtEnd(t, "layer", func(context.Context) error { return l.Close() })
	w.l = l
	return w
}

var bg = context.Background()

func (w *layerWorld) set(c StagedStore, key, value string, opts protocol.SetOptions) protocol.SetResult {
	w.t.Helper()
	res, err := c.Set(bg, []byte(key), []byte(value), opts)
	if err != nil {
		w.t.Fatalf("set %s: %v", key, err)
	}
	return res
}

func (w *layerWorld) get(c StagedStore, key string) protocol.GetResult {
	w.t.Helper()
	res, err := c.Get(bg, []byte(key), protocol.CallOptions{})
	if err != nil {
		w.t.Fatalf("get %s: %v", key, err)
	}
	return res
}

// The layer copies a key from the real store before it writes it, value
// and version: a SET NX of a key the real store holds is not applied and
// returns the real version, a SET NEX of the real value applies with a
// version above it. The real store keeps its value; a key the layer wrote
// no longer follows it, a key the layer only read does.
func TestLayerCopiesOnWrite(t *testing.T) {
	w := newLayerWorld(t)
	v := w.set(w.other, "k", "real", protocol.SetOptions{}).Version
	w.set(w.other, "read", "1", protocol.SetOptions{})

	res := w.set(w.l, "k", "staged", protocol.SetOptions{Condition: protocol.CondNX})
	if res.Applied || res.Version != v {
		t.Fatalf("SET NX over the real key: applied %v version %v, want not applied and the real version %v", res.Applied, res.Version, v)
	}
	res = w.set(w.l, "k", "real", protocol.SetOptions{Condition: protocol.CondNEX})
	if !res.Applied || res.Version.Compare(v) <= 0 {
		t.Fatalf("SET NEX of the real value: applied %v version %v, want applied above %v", res.Applied, res.Version, v)
	}
	staged := w.set(w.l, "k", "staged", protocol.SetOptions{})
	if got := w.get(w.real, "k"); string(got.Value) != "real" || got.Version != v {
		t.Fatalf("real store after staged writes: %q %v, want real %v", got.Value, got.Version, v)
	}
	w.set(w.other, "k", "changed", protocol.SetOptions{})
	w.set(w.other, "read", "2", protocol.SetOptions{})
	if got := w.get(w.l, "k"); string(got.Value) != "staged" || got.Version != staged.Version {
		t.Fatalf("layer's k after the real one changed: %q %v, want the staged %v", got.Value, got.Version, staged.Version)
	}
	if got := w.get(w.l, "read"); string(got.Value) != "2" {
		t.Fatalf("layer's read = %q, want the real store's 2 (a key only read stays live)", got.Value)
	}
}

// Deletes, conditions and fencing are the engine's: a DEL of a key absent
// in the real store removes nothing, a VDEL of another value is refused,
// a key written with a fencing token refuses a write without one, and a
// staged key with a ttl is gone once the layer's clock passes it.
func TestLayerSemanticsAreTheStores(t *testing.T) {
	w := newLayerWorld(t)
	w.set(w.other, "v", "x", protocol.SetOptions{})
	if n, err := w.l.Del(bg, []byte("absent"), protocol.DelOptions{}); n != 0 || err != nil {
		t.Fatalf("DEL of an absent key: %d, %v", n, err)
	}
	if n, err := w.l.VDel(bg, []byte("v"), []byte("y"), protocol.DelOptions{}); n != -1 || err != nil {
		t.Fatalf("VDEL of another value: %d, %v", n, err)
	}
	if n, err := w.l.VDel(bg, []byte("v"), []byte("x"), protocol.DelOptions{}); n != 1 || err != nil {
		t.Fatalf("VDEL of the real value: %d, %v", n, err)
	}
	if got := w.get(w.l, "v"); got.Found {
		t.Fatalf("v after a staged VDEL: %q", got.Value)
	}
	if got := w.get(w.real, "v"); string(got.Value) != "x" {
		t.Fatalf("real v after a staged VDEL: %q %v", got.Value, got.Found)
	}

	lock := w.set(w.l, "lk", "me", protocol.SetOptions{Condition: protocol.CondNEX})
	w.set(w.l, "fenced", "1", protocol.SetOptions{FencingToken: lock.Version})
	if _, err := w.l.Set(bg, []byte("fenced"), []byte("2"), protocol.SetOptions{}); !errors.Is(err, protocol.ErrMissingFencingToken) {
		t.Fatalf("unfenced SET of a fenced key: %v, want %v", err, protocol.ErrMissingFencingToken)
	}

	w.set(w.l, "ttl", "1", protocol.SetOptions{Expiry: 10 * time.Millisecond})
	if got := w.get(w.l, "ttl"); !got.Found {
		t.Fatal("staged key with a ttl absent before its deadline")
	}
	w.ms.Add(10)
	if got := w.get(w.l, "ttl"); got.Found {
		t.Fatalf("staged key with a ttl still there after it: %q", got.Value)
	}
}

// Keys under the private prefix are the layer's from the start: a key the
// real store holds there reads as absent, and writes there reach only the
// layer. drop forgets the copied keys it is not told to keep: they read
// from the real store again, and the next write copies them anew.
func TestLayerPrivateKeysAndDrop(t *testing.T) {
	w := newLayerWorld(t)
	timer := timers.ReservedPrefix + "timers/rule/x"
	w.set(w.other, timer, "real run's", protocol.SetOptions{})
	if got := w.get(w.l, timer); got.Found {
		t.Fatalf("private key read from the real store: %q", got.Value)
	}
	w.set(w.l, timer, "dry run's", protocol.SetOptions{})
	if got := w.get(w.real, timer); string(got.Value) != "real run's" {
		t.Fatalf("real private key after a layer write: %q", got.Value)
	}

	w.set(w.other, "a", "real a", protocol.SetOptions{})
	w.set(w.l, "a", "staged a", protocol.SetOptions{})
	w.set(w.l, "keep", "staged keep", protocol.SetOptions{})
	w.l.Drop(func(key string) bool { return key == "keep" })
	if got := w.get(w.l, "a"); string(got.Value) != "real a" {
		t.Fatalf("a after drop: %q, want the real store's", got.Value)
	}
	if got := w.get(w.l, "keep"); string(got.Value) != "staged keep" {
		t.Fatalf("keep after drop: %q, want the staged value", got.Value)
	}
	if res := w.set(w.l, "a", "again", protocol.SetOptions{Condition: protocol.CondNX}); res.Applied {
		t.Fatal("SET NX of a dropped key the real store holds was applied: not copied anew")
	}
	if got := w.get(w.l, timer); string(got.Value) != "dry run's" {
		t.Fatalf("private key after drop: %q, want the layer's", got.Value)
	}
}

// A write the layer stages notifies no one: a client watching the key in
// the real store hears only the real writes.
func TestLayerWritesNotifyNoOne(t *testing.T) {
	w := newLayerWorld(t)
	if err := w.other.KeyNotify(bg, []byte("k"), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	w.set(w.l, "k", "staged", protocol.SetOptions{})
	if _, err := w.l.Del(bg, []byte("k"), protocol.DelOptions{}); err != nil {
		t.Fatal(err)
	}
	w.set(w.real, "k", "real", protocol.SetOptions{})
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-w.other.Events():
			if ev.Kind != protocol.EventNotify {
				continue
			}
			if string(ev.Value) != "real" {
				t.Fatalf("notified of %s %q, want only the real SET", ev.Op, ev.Value)
			}
			return
		case <-deadline:
			t.Fatal("no notification of the real SET")
		}
	}
}
