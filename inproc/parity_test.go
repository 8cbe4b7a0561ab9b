package inproc_test

// The store's semantics as a client sees them, one table run twice: against
// the store in process (inproc, as ssrun test and dry runs use it) and over
// MQTT through the embedded broker (as production uses it). Any difference
// between the two is a failure of one of them.

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/inproc"
	"github.com/ssrun/ssrun/inproc/inproctest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
	"github.com/ssrun/ssrun/store"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// backend makes clients of one store on clk.
type backend struct {
	name string
	// start returns a function that connects a client of a new store.
	start func(t *testing.T, clk *testutil.Clock, quota int) func(id string) *protocol.Client
}

var backends = []backend{
	{"in-process", func(t *testing.T, clk *testutil.Clock, quota int) func(string) *protocol.Client {
		s := store.New(clk.Now, store.Quota{Keys: quota, Bytes: -1})
		sv := inproc.New(s)
		return func(id string) *protocol.Client { return inproctest.Client(t, sv, id, clk.Now) }
	}},
	{"mqtt", func(t *testing.T, clk *testutil.Clock, quota int) func(string) *protocol.Client {
		b := brokertest.Start(t, func(c *broker.Config) { c.Now, c.Quota = clk.Now, quota })
		return func(id string) *protocol.Client {
			return protocoltest.Connect(t, protocol.Config{Servers: []string{b.Addr()}, ClientID: id, Now: clk.Now, CleanStart: true})
		}
	}},
}

// world is what a case acts on: two clients of one store, its clock.
type world struct {
	t    *testing.T
	a, b *protocol.Client
	clk  *testutil.Clock
}

var ctx = context.Background()

func (w *world) set(c *protocol.Client, key, value string, opts protocol.SetOptions) (bool, error) {
	r, err := c.Set(ctx, []byte(key), []byte(value), opts)
	return r.Applied, err
}

func (w *world) get(c *protocol.Client, key string) string {
	w.t.Helper()
	r, err := c.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		w.t.Fatalf("GET %s: %v", key, err)
	}
	if !r.Found {
		return "<absent>"
	}
	return string(r.Value)
}

// note waits for c's next notification and renders it.
func (w *world) note(c *protocol.Client) string {
	w.t.Helper()
	for {
		select {
		case ev := <-c.Events():
			if ev.Kind != protocol.EventNotify {
				continue
			}
			if ev.Op == protocol.OpDelete {
				return fmt.Sprintf("%s DELETE", ev.Key)
			}
			return fmt.Sprintf("%s SET %s", ev.Key, ev.Value)
		case <-time.After(10 * time.Second):
			w.t.Fatal("no notification")
			return ""
		}
	}
}

func (w *world) want(what string, got, want any) {
	w.t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		w.t.Fatalf("%s: got %v, want %v", what, got, want)
	}
}

func (w *world) wantErr(what string, err, want error) {
	w.t.Helper()
	if !errors.Is(err, want) {
		w.t.Fatalf("%s: got %v, want %v", what, err, want)
	}
}

var cases = []struct {
	name  string
	quota int // keys; 0: the default
	run   func(w *world)
}{
	{"set get del", 0, func(w *world) {
		ok, err := w.set(w.a, "k", "v1", protocol.SetOptions{})
		w.want("SET", fmt.Sprint(ok, err), "true <nil>")
		w.want("GET", w.get(w.b, "k"), "v1")
		n, err := w.a.Del(ctx, []byte("k"), protocol.DelOptions{})
		w.want("DEL", fmt.Sprint(n, err), "1 <nil>")
		n, err = w.a.Del(ctx, []byte("k"), protocol.DelOptions{})
		w.want("DEL again", fmt.Sprint(n, err), "0 <nil>")
		w.want("GET", w.get(w.b, "k"), "<absent>")
	}},
	{"versions increase and GET returns the SET's", 0, func(w *world) {
		r1, _ := w.a.Set(ctx, []byte("k"), []byte("1"), protocol.SetOptions{})
		r2, _ := w.b.Set(ctx, []byte("k"), []byte("2"), protocol.SetOptions{})
		g, _ := w.a.Get(ctx, []byte("k"), protocol.CallOptions{})
		w.want("second version after first", r1.Version.Compare(r2.Version) < 0, true)
		w.want("GET version", g.Version, r2.Version)
	}},
	{"NX and NEX", 0, func(w *world) {
		ok, _ := w.set(w.a, "k", "v", protocol.SetOptions{Condition: protocol.CondNX})
		w.want("NX absent", ok, true)
		ok, _ = w.set(w.b, "k", "w", protocol.SetOptions{Condition: protocol.CondNX})
		w.want("NX present", ok, false)
		ok, _ = w.set(w.b, "k", "v", protocol.SetOptions{Condition: protocol.CondNEX})
		w.want("NEX same value", ok, true)
		ok, _ = w.set(w.b, "k", "w", protocol.SetOptions{Condition: protocol.CondNEX})
		w.want("NEX other value", ok, false)
		w.want("GET", w.get(w.a, "k"), "v")
	}},
	{"VDEL", 0, func(w *world) {
		_, _ = w.set(w.a, "k", "v", protocol.SetOptions{})
		n, _ := w.a.VDel(ctx, []byte("k"), []byte("other"), protocol.DelOptions{})
		w.want("VDEL mismatch", n, -1)
		n, _ = w.a.VDel(ctx, []byte("k"), []byte("v"), protocol.DelOptions{})
		w.want("VDEL match", n, 1)
		n, _ = w.a.VDel(ctx, []byte("k"), []byte("v"), protocol.DelOptions{})
		w.want("VDEL absent", n, 0)
	}},
	{"PX expiry notifies a DELETE; a SET without PX keeps the key", 0, func(w *world) {
		if err := w.b.KeyNotify(ctx, []byte("k"), protocol.CallOptions{}); err != nil {
			w.t.Fatal(err)
		}
		_, _ = w.set(w.a, "k", "v", protocol.SetOptions{Expiry: time.Second})
		w.want("notification", w.note(w.b), "k SET v")
		w.clk.Advance(2 * time.Second)
		w.want("GET after the deadline", w.get(w.a, "k"), "<absent>")
		w.want("notification", w.note(w.b), "k DELETE")
		_, _ = w.set(w.a, "k", "v2", protocol.SetOptions{Expiry: time.Second})
		_, _ = w.set(w.a, "k", "v3", protocol.SetOptions{})
		w.clk.Advance(2 * time.Second)
		w.want("GET after the old deadline", w.get(w.a, "k"), "v3")
	}},
	{"fencing", 0, func(w *world) {
		lock, _ := w.a.Set(ctx, []byte("lock"), []byte("a"), protocol.SetOptions{Condition: protocol.CondNX})
		token := lock.Version
		ok, err := w.set(w.a, "guarded", "1", protocol.SetOptions{FencingToken: token})
		w.want("fenced SET", fmt.Sprint(ok, err), "true <nil>")
		_, err = w.set(w.b, "guarded", "2", protocol.SetOptions{})
		w.wantErr("SET without the token", err, protocol.ErrMissingFencingToken)
		newer, _ := w.b.Set(ctx, []byte("lock"), []byte("b"), protocol.SetOptions{})
		ok, err = w.set(w.b, "guarded", "3", protocol.SetOptions{FencingToken: newer.Version})
		w.want("newer token", fmt.Sprint(ok, err), "true <nil>")
		_, err = w.set(w.a, "guarded", "4", protocol.SetOptions{FencingToken: token})
		w.wantErr("older token", err, protocol.ErrFencingTokenLowerVersion)
		_, err = w.a.Del(ctx, []byte("guarded"), protocol.DelOptions{})
		w.wantErr("DEL without the token", err, protocol.ErrMissingFencingToken)
		n, err := w.a.Del(ctx, []byte("guarded"), protocol.DelOptions{FencingToken: newer.Version})
		w.want("DEL with the token", fmt.Sprint(n, err), "1 <nil>")
		ok, err = w.set(w.a, "guarded", "5", protocol.SetOptions{})
		w.want("SET after DEL: unfenced", fmt.Sprint(ok, err), "true <nil>")
	}},
	{"notifications: one per change, the writer named, none after STOP", 0, func(w *world) {
		if err := w.b.KeyNotify(ctx, []byte("k"), protocol.CallOptions{}); err != nil {
			w.t.Fatal(err)
		}
		_, _ = w.set(w.a, "k", "1", protocol.SetOptions{})
		var src string
		select {
		case ev := <-w.b.Events():
			for ev.Kind != protocol.EventNotify {
				ev = <-w.b.Events()
			}
			src = ev.Source
		case <-time.After(10 * time.Second):
			w.t.Fatal("no notification")
		}
		w.want("__srcId", src, w.a.ClientID())
		_, _ = w.a.Del(ctx, []byte("k"), protocol.DelOptions{})
		w.want("notification", w.note(w.b), "k DELETE")
		existed, _ := w.b.KeyNotifyStop(ctx, []byte("k"), protocol.CallOptions{})
		w.want("STOP", existed, true)
		_, _ = w.set(w.a, "k", "2", protocol.SetOptions{})
		if err := w.b.KeyNotify(ctx, []byte("other"), protocol.CallOptions{}); err != nil {
			w.t.Fatal(err)
		}
		_, _ = w.set(w.a, "other", "x", protocol.SetOptions{})
		w.want("next notification (none for k)", w.note(w.b), "other SET x")
	}},
	{"quota counts keys and registrations", 4, func(w *world) {
		for i := range 3 {
			if _, err := w.set(w.a, fmt.Sprint("k", i), "v", protocol.SetOptions{}); err != nil {
				w.t.Fatal(err)
			}
		}
		if err := w.b.KeyNotify(ctx, []byte("watched"), protocol.CallOptions{}); err != nil {
			w.t.Fatal(err)
		}
		_, err := w.set(w.a, "k4", "v", protocol.SetOptions{})
		w.wantErr("SET past the quota", err, protocol.ErrQuotaExceeded)
		_, err = w.set(w.a, "k0", "updated", protocol.SetOptions{})
		w.want("update within the quota", err, nil)
	}},
	{"SCAN lists the keys of a pattern, every one once", 0, func(w *world) {
		var want []string
		for i := range 1500 {
			k := fmt.Sprintf("thermostats/%04d/setPoint", i)
			want = append(want, k)
			_, _ = w.set(w.a, k, "20", protocol.SetOptions{})
			_, _ = w.set(w.a, fmt.Sprintf("thermostats/%04d/mode", i), "heat", protocol.SetOptions{})
		}
		var got []string
		for k, err := range w.b.Keys(ctx, []byte("thermostats/*/setPoint"), protocol.ScanOptions{}) {
			if err != nil {
				w.t.Fatal(err)
			}
			got = append(got, string(k))
		}
		w.want("keys", fmt.Sprint(got), fmt.Sprint(want))
	}},
	{"a timestamp more than a minute ahead is refused", 0, func(w *world) {
		if _, err := w.set(w.a, "k", "v", protocol.SetOptions{}); err != nil {
			w.t.Fatal(err)
		}
		w.clk.Advance(-2 * time.Minute) // the client's HLC stays where it was: 2 minutes ahead now
		_, err := w.set(w.a, "k", "w", protocol.SetOptions{})
		w.wantErr("SET with a __ts 2 min ahead", err, protocol.ErrTimestampSkew)
		w.clk.Advance(2 * time.Minute) // else the version of "v" is too far ahead for the client
		w.want("GET", w.get(w.b, "k"), "v")
	}},
}

func TestParity(t *testing.T) {
	for _, be := range backends {
		for _, tc := range cases {
			t.Run(be.name+"/"+tc.name, func(t *testing.T) {
				clk := testutil.NewClock(time.Now())
				quota := tc.quota
				if quota == 0 {
					quota = -1
				}
				dial := be.start(t, clk, quota)
				tc.run(&world{t: t, a: dial("client-a"), b: dial("client-b"), clk: clk})
			})
		}
	}
}
