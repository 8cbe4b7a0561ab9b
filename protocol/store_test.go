package protocol

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Tests in this file run against the embedded state store (brokertest).

// skewedClock is a wall clock that tests can move forward.
type skewedClock struct{ offset atomic.Int64 }

func (s *skewedClock) now() time.Time { return time.Now().Add(time.Duration(s.offset.Load())) }

func (s *skewedClock) advance(d time.Duration) { s.offset.Add(int64(d)) }

func bigBytes(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = seed + byte(i*7)
	}
	copy(b, "\r\n\x00")
	return b
}

// Every command against the store, with binary keys and values.
func TestCommandsAgainstStore(t *testing.T) {
	b := brokertest.Start(t)
	c := connect(t, b.Addr())
	ctx := context.Background()
	keys := map[string][]byte{
		"plain":     []byte("SETKEY2"),
		"CR LF NUL": []byte("a\r\nb\x00c"),
		"6.5 KB":    bigBytes(6500, 'k'),
	}
	values := map[string][]byte{
		"plain":  []byte("VALUE5"),
		"empty":  {},
		"binary": []byte("\x00\r\n$3\r\n*1\r\n"),
		"65 KB":  bigBytes(65000, 'v'),
	}
	for kn, key := range keys {
		for vn, value := range values {
			t.Run(kn+" key, "+vn+" value", func(t *testing.T) {
				defer func() { _, _ = c.Del(ctx, key, DelOptions{}) }()
				if g, err := c.Get(ctx, key, CallOptions{}); err != nil || g.Found {
					t.Fatalf("get before set = %+v, %v; want not found", g, err)
				}
				set, err := c.Set(ctx, key, value, SetOptions{})
				if err != nil || !set.Applied || set.Version.IsZero() {
					t.Fatalf("set = %+v, %v", set, err)
				}
				g, err := c.Get(ctx, key, CallOptions{})
				if err != nil || !g.Found || !bytes.Equal(g.Value, value) || g.Version != set.Version {
					t.Fatalf("get = found %v, %d bytes, version %s, %v; want %d bytes, version %s", g.Found, len(g.Value), g.Version, err, len(value), set.Version)
				}
				if n, err := c.VDel(ctx, key, append([]byte("x"), value...), DelOptions{}); err != nil || n != -1 {
					t.Fatalf("vdel with another value = %d, %v; want -1", n, err)
				}
				if n, err := c.VDel(ctx, key, value, DelOptions{}); err != nil || n != 1 {
					t.Fatalf("vdel = %d, %v; want 1", n, err)
				}
				if n, err := c.VDel(ctx, key, value, DelOptions{}); err != nil || n != 0 {
					t.Fatalf("vdel again = %d, %v; want 0", n, err)
				}
				if _, err := c.Set(ctx, key, value, SetOptions{}); err != nil {
					t.Fatal(err)
				}
				if n, err := c.Del(ctx, key, DelOptions{}); err != nil || n != 1 {
					t.Fatalf("del = %d, %v; want 1", n, err)
				}
				if n, err := c.Del(ctx, key, DelOptions{}); err != nil || n != 0 {
					t.Fatalf("del again = %d, %v; want 0", n, err)
				}
			})
		}
	}
}

// NX, NEX and PX semantics as seen through the client.
func TestConditionsAndExpiry(t *testing.T) {
	clock := &skewedClock{}
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.Now = clock.now })
	c := connect(t, b.Addr())
	ctx := context.Background()
	key := []byte("lock")

	first, err := c.Set(ctx, key, []byte("me"), SetOptions{Condition: CondNX})
	if err != nil || !first.Applied {
		t.Fatalf("NX on an absent key = %+v, %v", first, err)
	}
	tests := []struct {
		name    string
		value   string
		opts    SetOptions
		applied bool
	}{
		{"NX on a present key", "you", SetOptions{Condition: CondNX}, false},
		{"NEX with another value", "you", SetOptions{Condition: CondNEX}, false},
		{"NEX with the same value", "me", SetOptions{Condition: CondNEX, Expiry: time.Second}, true},
	}
	last := first.Version
	for _, tc := range tests {
		res, err := c.Set(ctx, key, []byte(tc.value), tc.opts)
		if err != nil || res.Applied != tc.applied {
			t.Fatalf("%s = %+v, %v; want applied %v", tc.name, res, err, tc.applied)
		}
		if tc.applied && res.Version.Compare(last) <= 0 {
			t.Errorf("%s: version %s not after %s", tc.name, res.Version, last)
		}
		if !tc.applied && res.Version != last {
			t.Errorf("%s: version %s, want the stored %s", tc.name, res.Version, last)
		}
		if tc.applied {
			last = res.Version
		}
	}
	// PX 1 s: present now, absent once the store's clock is 1 s later.
	if g, err := c.Get(ctx, key, CallOptions{}); err != nil || !g.Found {
		t.Fatalf("get before the deadline = %+v, %v", g, err)
	}
	clock.advance(1001 * time.Millisecond)
	if g, err := c.Get(ctx, key, CallOptions{}); err != nil || g.Found {
		t.Fatalf("get after the deadline = %+v, %v; want not found", g, err)
	}
	if res, err := c.Set(ctx, key, []byte("you"), SetOptions{Condition: CondNX}); err != nil || !res.Applied {
		t.Fatalf("NX after expiry = %+v, %v", res, err)
	}
}

// Fencing: E2 and E4 come back as typed errors; the lock's version passes.
func TestFencing(t *testing.T) {
	b := brokertest.Start(t)
	c := connect(t, b.Addr())
	ctx := context.Background()
	before := c.clock.Tick() // the client's HLC before taking the lock
	lock, err := c.Set(ctx, []byte("lock"), []byte(c.ClientID()), SetOptions{Condition: CondNEX, Expiry: 10 * time.Second})
	if err != nil || !lock.Applied {
		t.Fatalf("lock = %+v, %v", lock, err)
	}
	token := lock.Version
	key := []byte("protected")
	if _, err := c.Set(ctx, key, []byte("v1"), SetOptions{FencingToken: token}); err != nil {
		t.Fatalf("fenced set: %v", err)
	}
	tooFar := hlc.HLC{Wall: time.Now().UnixMilli() + 120_000, Node: "x"}
	tests := []struct {
		name string
		call func() error
		want error
	}{
		{"set without token", func() error {
			_, err := c.Set(ctx, key, []byte("v2"), SetOptions{})
			return err
		}, ErrMissingFencingToken},
		{"del without token", func() error {
			_, err := c.Del(ctx, key, DelOptions{})
			return err
		}, ErrMissingFencingToken},
		{"vdel without token", func() error {
			_, err := c.VDel(ctx, key, []byte("v1"), DelOptions{})
			return err
		}, ErrMissingFencingToken},
		{"set with the pre-lock clock", func() error {
			_, err := c.Set(ctx, key, []byte("v2"), SetOptions{FencingToken: before})
			return err
		}, ErrFencingTokenLowerVersion},
		{"del with the pre-lock clock", func() error {
			_, err := c.Del(ctx, key, DelOptions{FencingToken: before})
			return err
		}, ErrFencingTokenLowerVersion},
		{"set with a token too far ahead", func() error {
			_, err := c.Set(ctx, key, []byte("v2"), SetOptions{FencingToken: tooFar})
			return err
		}, ErrFencingTokenSkew},
		{"get needs no token", func() error {
			g, err := c.Get(ctx, key, CallOptions{})
			if err == nil && string(g.Value) != "v1" {
				err = fmt.Errorf("value %q after refused writes", g.Value)
			}
			return err
		}, nil},
		{"set with the lock token", func() error {
			_, err := c.Set(ctx, key, []byte("v3"), SetOptions{FencingToken: token})
			return err
		}, nil},
		{"del with the lock token", func() error {
			n, err := c.Del(ctx, key, DelOptions{FencingToken: token})
			if err == nil && n != 1 {
				err = fmt.Errorf("del = %d", n)
			}
			return err
		}, nil},
	}
	for _, tc := range tests {
		err := tc.call()
		if (tc.want == nil) != (err == nil) || !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
		var se *ServiceError
		if tc.want != nil && !errors.As(err, &se) {
			t.Errorf("%s: %v is not a *ServiceError", tc.name, err)
		}
	}
}

// A client whose wall clock is behind the store's still issues __ts after
// every version it has seen.
func TestClockFollowsStoreVersions(t *testing.T) {
	b := brokertest.Start(t)
	c := connect(t, b.Addr(), func(cfg *Config) {
		cfg.Now = func() time.Time { return time.Now().Add(-30 * time.Second) }
	})
	ctx := context.Background()
	var last hlc.HLC
	for i := range 5 {
		res, err := c.Set(ctx, []byte("k"), []byte(fmt.Sprint(i)), SetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Version.Compare(last) <= 0 {
			t.Fatalf("version %s not after %s", res.Version, last)
		}
		last = res.Version
		if now := c.clock.Now(); now.Wall < last.Wall || (now.Wall == last.Wall && now.Counter < last.Counter) {
			t.Fatalf("client clock %s behind the store version %s", now, last)
		}
	}
	if d := time.Duration(c.clock.Now().Wall-time.Now().Add(-30*time.Second).UnixMilli()) * time.Millisecond; d < 20*time.Second {
		t.Errorf("client clock only %v ahead of its own wall clock; it did not follow the store", d)
	}
}

// 500 calls in flight on one connection, all answered with their own data.
func TestPipelining(t *testing.T) {
	b := brokertest.Start(t)
	c := connect(t, b.Addr())
	ctx := context.Background()
	const n = 500
	testutil.InFlight(t, n, n, func(_, i int) error {
		key := []byte(fmt.Sprint("pipe-", i))
		value := []byte(strings.Repeat(fmt.Sprint(i, ";"), i%17+1))
		// Correctness, not speed: generous timeouts for loaded -race runs.
		set, err := c.Set(ctx, key, value, SetOptions{Timeout: time.Minute})
		if err != nil {
			return err
		}
		g, err := c.Get(ctx, key, CallOptions{Timeout: time.Minute})
		switch {
		case err != nil:
			return err
		case !bytes.Equal(g.Value, value) || g.Version != set.Version:
			return fmt.Errorf("get %s = %q %s, want %q %s", key, g.Value, g.Version, value, set.Version)
		}
		return nil
	})
	if st := c.Stats(); st.Requests != 2*n || st.Responses != 2*n || st.Pending != 0 || c.pendingLen() != 0 {
		t.Errorf("stats %+v, want %d requests and responses, none pending", st, 2*n)
	}
}

// KEYNOTIFY through the store: one event per change, byte-exact, with the
// versions of the writes; STOP ends it.
func TestKeyNotifyAgainstStore(t *testing.T) {
	b := brokertest.Start(t)
	c := connect(t, b.Addr())
	writer := connect(t, b.Addr())
	ctx := context.Background()
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	key := []byte("watch\r\n\x00me")
	other := []byte("other")
	for _, k := range [][]byte{key, other} {
		if err := c.KeyNotify(ctx, k, CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	value := bigBytes(1000, 'n')
	set, err := writer.Set(ctx, key, value, SetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := nextEvent(t, c)
	if e.Kind != EventNotify || !bytes.Equal(e.Key, key) || e.Op != OpSet || !bytes.Equal(e.Value, value) || e.Version != set.Version {
		t.Fatalf("event %v %q %s %d bytes %s; want SET of %d bytes at %s", e.Kind, e.Key, e.Op, len(e.Value), e.Version, len(value), set.Version)
	}
	if e.Source != writer.ClientID() { // the embedded broker names the writer
		t.Fatalf("event from %q, want the writer %q", e.Source, writer.ClientID())
	}
	if _, err := writer.Del(ctx, key, DelOptions{}); err != nil {
		t.Fatal(err)
	}
	e = nextEvent(t, c)
	if e.Kind != EventNotify || !bytes.Equal(e.Key, key) || e.Op != OpDelete || e.Value != nil || e.Version.Compare(set.Version) < 0 {
		t.Fatalf("event %+v, want DELETE after %s", e, set.Version)
	}
	if ok, err := c.KeyNotifyStop(ctx, key, CallOptions{}); err != nil || !ok {
		t.Fatalf("stop = %v, %v; want true", ok, err)
	}
	if ok, err := c.KeyNotifyStop(ctx, key, CallOptions{}); err != nil || ok {
		t.Fatalf("second stop = %v, %v; want false", ok, err)
	}
	// The stopped key's change is not notified; the next event is other's.
	if _, err := writer.Set(ctx, key, []byte("x"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := writer.Set(ctx, other, []byte("y"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, c); !bytes.Equal(e.Key, other) {
		t.Fatalf("event for %q, want %q", e.Key, other)
	}
	if st := c.Stats(); st.DuplicatesSuppressed != 0 || st.NotificationsDropped != 0 {
		t.Errorf("stats %+v: the embedded broker sends each notification once", st)
	}
}

// Reconnect: the store forgets registrations when the connection drops; the
// client re-registers them before EventConnected, calls during the outage
// fail fast.
func TestReconnectReregisters(t *testing.T) {
	b := brokertest.Start(t)
	p := testnet.NewProxy(t, b.Addr())
	c := connect(t, p.Addr())
	writer := connect(t, b.Addr())
	ctx := context.Background()
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	watched, stopped := []byte("watched"), []byte("stopped")
	for _, k := range [][]byte{watched, stopped} {
		if err := c.KeyNotify(ctx, k, CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.KeyNotifyStop(ctx, stopped, CallOptions{}); err != nil {
		t.Fatal(err)
	}

	p.Cut()
	if e := nextEvent(t, c); e.Kind != EventDisconnected || !errors.Is(e.Err, ErrConnectionLost) {
		t.Fatalf("event %v %v, want disconnected", e.Kind, e.Err)
	}
	if _, err := c.Get(ctx, watched, CallOptions{Timeout: time.Minute}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("get during the outage: %v, want ErrNotConnected", err)
	}
	// Asked for while disconnected: registered on the next connection.
	late := []byte("late")
	if err := c.KeyNotify(ctx, late, CallOptions{}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("keynotify during the outage: %v, want ErrNotConnected", err)
	}
	// Written while disconnected: not notified (a caller re-reads on connect).
	if _, err := writer.Set(ctx, watched, []byte("offline"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	// Let the broker finish with the dropped connection first (see
	// scriptServer.waitGone for the mochi takeover race this avoids).
	testutil.WaitFor(t, "the broker to drop the registrations", func() bool { return b.Stats().Registrations == 0 })
	p.Heal()
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatalf("event %v, want connected", e.Kind)
	}
	g, err := c.Get(ctx, watched, CallOptions{})
	if err != nil || string(g.Value) != "offline" {
		t.Fatalf("re-read = %+v, %v", g, err)
	}
	if _, err := writer.Set(ctx, stopped, []byte("s"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, k := range [][]byte{watched, late} {
		set, err := writer.Set(ctx, k, []byte("online"), SetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		e := nextEvent(t, c)
		if e.Kind != EventNotify || !bytes.Equal(e.Key, k) || string(e.Value) != "online" || e.Version != set.Version {
			t.Fatalf("event %v %q %q, want SET of %q after the reconnect", e.Kind, e.Key, e.Value, k)
		}
	}
	if st := c.Stats(); st.Reconnects != 1 || st.NotConnected != 2 {
		t.Errorf("stats %+v, want 1 reconnect, 2 fast failures", st)
	}
}

// mqtts:// with a caller-supplied TLS config (a self-signed CA here).
func TestTLS(t *testing.T) {
	certFile, keyFile, roots := testutil.SelfSignedCert(t)
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.TLSCertFile, cfg.TLSKeyFile = certFile, keyFile })
	c := connect(t, "mqtts://"+b.Addr(), func(cfg *Config) { cfg.TLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12} })
	if _, err := c.Set(context.Background(), []byte("k"), []byte("over TLS"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Get(context.Background(), []byte("k"), CallOptions{}); err != nil || string(g.Value) != "over TLS" {
		t.Fatalf("get = %+v, %v", g, err)
	}
}
