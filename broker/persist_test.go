package broker_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// withData persists the broker's store in dir.
func withData(dir string, policy broker.FsyncPolicy) func(*broker.Config) {
	return func(c *broker.Config) { c.DataDir, c.Fsync = dir, policy }
}

// A broker restarted on the same data directory has every key with its
// value and exact version, the remaining time of its expiry, and its
// fencing token; deleted keys stay deleted; the clock goes on from where it
// was.
func TestRestartKeepsKeysVersionsExpiriesAndFences(t *testing.T) {
	for _, policy := range []broker.FsyncPolicy{broker.FsyncAlways, broker.FsyncInterval, broker.FsyncNever} {
		t.Run(policy.String(), func(t *testing.T) {
			dir := t.TempDir()
			clk := newFakeClock()
			b := brokertest.Start(t, withData(dir, policy), func(c *broker.Config) { c.Now = clk.Now })
			c := dial(t, b)
			plain := c.call("SET", "plain", "v1")
			empty := c.call("SET", "empty", "")
			lease := c.call("SET", "lease", "holder", "NEX", "PX", "10000")
			fence := lease.ts
			fenced := c.do(fence, "SET", "fenced", "guarded")
			c.set("gone", "x")
			expectPayload(t, c.call("DEL", "gone"), ":1\r\n")
			c.set("vgone", "x")
			expectPayload(t, c.call("VDEL", "vgone", "x"), ":1\r\n")
			expectPayload(t, c.call("SET", "short", "x", "PX", "100"), "+OK\r\n")
			last := c.call("SET", "plain", "v2")
			c.close()
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}

			clk.Advance(time.Second) // "short" expired while the broker was down
			b = brokertest.Start(t, withData(dir, policy), func(c *broker.Config) { c.Now = clk.Now })
			c = dial(t, b)
			for _, tc := range []struct {
				key  string
				want string
				ts   string
			}{
				{"plain", "$2\r\nv2\r\n", last.ts},
				{"empty", "$0\r\n\r\n", empty.ts},
				{"lease", "$6\r\nholder\r\n", lease.ts},
				{"fenced", "$7\r\nguarded\r\n", fenced.ts},
				{"gone", "$-1\r\n", ""},
				{"vgone", "$-1\r\n", ""},
				{"short", "$-1\r\n", ""},
			} {
				r := c.call("GET", tc.key)
				if string(r.payload) != tc.want || r.ts != tc.ts {
					t.Errorf("GET %s after restart: %s, want %q __ts=%q", tc.key, r, tc.want, tc.ts)
				}
			}
			if plain.ts == last.ts {
				t.Fatal("the second SET kept the version")
			}
			// The fencing token survived: older tokens and no token are refused.
			older := mustHLC(t, fence)
			older.Counter, older.Wall = 0, older.Wall-1
			expectPayload(t, c.do(older.String(), "SET", "fenced", "late"), "-ERR "+wire.ErrTextFencingTokenLower+"\r\n")
			expectPayload(t, c.call("SET", "fenced", "late"), "-ERR "+wire.ErrTextMissingFencingToken+"\r\n")
			expectPayload(t, c.do(fence, "SET", "fenced", "ok"), "+OK\r\n")
			// Versions go on increasing across the restart.
			next := c.call("SET", "plain", "v3")
			if mustHLC(t, next.ts).Compare(mustHLC(t, last.ts)) <= 0 {
				t.Fatalf("version after restart %s not above %s from before", next.ts, last.ts)
			}
			// The lease still expires, 10 s after it was set, and notifies.
			c.keyNotify("lease")
			clk.Advance(8 * time.Second)
			expectPayload(t, c.call("GET", "lease"), "$6\r\nholder\r\n")
			clk.Advance(time.Second)
			expectPayload(t, c.call("GET", "lease"), "$-1\r\n")
			if n := c.nextNote(); string(n.key) != "lease" || n.op != "DELETE" {
				t.Fatalf("notification %s %s, want lease DELETE", n.key, n.op)
			}
		})
	}
}

// heldFsync blocks every fsync until released, and says when one started.
type heldFsync struct {
	started chan struct{}
	release chan struct{}
}

func holdFsync(t *testing.T, b *broker.Broker) *heldFsync {
	h := &heldFsync{started: make(chan struct{}, 64), release: make(chan struct{})}
	broker.SetFsync(b, func(f *os.File) error {
		select {
		case h.started <- struct{}{}:
		default:
		}
		<-h.release
		return f.Sync()
	})
	t.Cleanup(h.free)
	return h
}

func (h *heldFsync) free() {
	select {
	case <-h.release:
	default:
		close(h.release)
	}
}

func (h *heldFsync) waitStarted(t *testing.T) {
	t.Helper()
	select {
	case <-h.started:
	case <-time.After(wait):
		t.Fatal("no fsync started")
	}
}

// callAsync runs a request on another goroutine.
func callAsync(c *client, args ...string) <-chan result {
	out := make(chan result, 1)
	go func() {
		r, err := c.tryCall(args...)
		if err != nil {
			c.t.Errorf("%v", err)
		}
		out <- r
	}()
	return out
}

// Under FsyncAlways the reply to a SET, and its notification, leave only
// after the fsync that covers the SET returned; a GET of the key from
// another client waits too (it would show a state a crash could undo).
// Under FsyncInterval nothing waits.
func TestRepliesWaitForFsync(t *testing.T) {
	t.Run("always", func(t *testing.T) {
		b := brokertest.Start(t, withData(t.TempDir(), broker.FsyncAlways))
		h := holdFsync(t, b)
		a, other := dial(t, b), dial(t, b)
		a.keyNotify("k")
		set := callAsync(a, "SET", "k", "v")
		h.waitStarted(t) // the SET is journaled and its fsync is held
		get := callAsync(other, "GET", "k")
		// Nothing may arrive while the fsync is held. (A short look: a
		// broken broker would answer at once.)
		select {
		case r := <-set:
			t.Fatalf("SET answered before its fsync returned: %s", r)
		case r := <-get:
			t.Fatalf("GET answered before the SET's fsync returned: %s", r)
		case n := <-a.notes:
			t.Fatalf("notification %s %s before the SET's fsync returned", n.key, n.op)
		case <-time.After(200 * time.Millisecond):
		}
		h.free()
		expectPayload(t, <-set, "+OK\r\n")
		expectPayload(t, <-get, "$1\r\nv\r\n")
		if n := a.nextNote(); string(n.key) != "k" || n.op != "SET" {
			t.Fatalf("notification %s %s", n.key, n.op)
		}
	})
	t.Run("interval", func(t *testing.T) {
		b := brokertest.Start(t, withData(t.TempDir(), broker.FsyncInterval), func(c *broker.Config) { c.FsyncInterval = time.Millisecond })
		h := holdFsync(t, b)
		c := dial(t, b)
		c.set("k", "v")
		h.waitStarted(t) // held from now on
		c.set("k", "w")
		expectPayload(t, c.call("GET", "k"), "$1\r\nw\r\n")
	})
}

// count returns how many messages contain sub.
func (l *logCapture) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			n++
		}
	}
	return n
}

// Without a data directory the broker says at start that keys live in
// memory, and says once that aio-persistence is not honoured. With one it
// says where they are kept and honours every SET.
func TestSaysWhereKeysLive(t *testing.T) {
	const warning = "asked for aio-persistence, but the state store keeps keys in memory only"
	persisted := func(c *client, key string) {
		p := c.request(resp.EncodeRequest([]byte("SET"), []byte(key), []byte("v")))
		p.Properties.User.Add(wire.PropPersistence, "true")
		expectPayload(t, c.mustExchange(p), "+OK\r\n")
	}
	logs := &logCapture{}
	b := brokertest.Start(t, withLogs(logs))
	if !logs.has("INFO state store in memory only: keys are lost when the broker stops") {
		t.Fatalf("no in-memory notice at start: %q", logs.msgs)
	}
	c := dial(t, b)
	c.set("plain", "v")
	if logs.count(warning) != 0 {
		t.Fatal("aio-persistence warning without the property")
	}
	persisted(c, "a")
	persisted(c, "b")
	if n := logs.count("WARN a SET " + warning); n != 1 {
		t.Fatalf("%d aio-persistence warnings after two such SETs, want 1: %q", n, logs.msgs)
	}

	logs = &logCapture{}
	b = brokertest.Start(t, withLogs(logs), withData(t.TempDir(), broker.FsyncAlways))
	if !logs.has("INFO state store persisted") || logs.has("in memory only") {
		t.Fatalf("start logs with a data directory: %q", logs.msgs)
	}
	persisted(dial(t, b), "a")
	if logs.count(warning) != 0 {
		t.Fatal("aio-persistence warning with a data directory")
	}
}

// A second broker on a directory in use is refused with an error naming
// the lock; once the first closes, the directory is free.
func TestSecondBrokerOnSameDataDirRefused(t *testing.T) {
	dir := t.TempDir()
	first := brokertest.Start(t, withData(dir, broker.FsyncAlways))
	_, err := broker.New(broker.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if !errors.Is(err, broker.ErrDataLocked) || !strings.Contains(err.Error(), filepath.Join(dir, "LOCK")) ||
		!strings.Contains(err.Error(), "data directory "+dir) {
		t.Fatalf("second broker: %v", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	second, err := broker.New(broker.Config{DataDir: dir, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("after the first closed: %v", err)
	}
	if err := second.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := broker.New(broker.Config{DataDir: dir, Fsync: 7}); !errors.Is(err, broker.ErrConfig) {
		t.Fatalf("unknown fsync policy: %v", err)
	}
}
