package broker_test

// The Go SDK's leasedlock recipe (statestore-protocol.md §14) on the test
// client, since the Azure Go SDK cannot be fetched here: acquire = SET NEX
// PX with the reply __ts as token, release = VDEL, holder = GET, lock =
// KEYNOTIFY first then acquire or wait for a DELETE, Edit = lock, GET, SET or
// DEL with the token as __ft, unlock.

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

type lease struct {
	c      *client
	name   string
	holder string
}

func newLease(c *client, name, session string) *lease {
	holder := c.id
	if session != "" {
		holder += ":" + session
	}
	return &lease{c: c, name: name, holder: holder}
}

var errNoLease = errors.New("lease held by someone else")

// try is one acquisition attempt; it returns the token (the lock version).
func (l *lease) try(d time.Duration) (string, error) {
	r := l.c.call("SET", l.name, l.holder, "NEX", "PX", strconv.FormatInt(d.Milliseconds(), 10))
	switch string(r.payload) {
	case "+OK\r\n":
		if !r.hasTS {
			return "", errors.New("lease acquired without a version")
		}
		return r.ts, nil
	case ":-1\r\n":
		return "", errNoLease
	}
	return "", fmt.Errorf("acquire %s: %q", l.name, r.payload)
}

func (l *lease) release() { l.c.call("VDEL", l.name, l.holder) }

func (l *lease) holderOf() (string, bool) {
	r := l.c.call("GET", l.name)
	return string(r.reply.Str), r.hasTS
}

// lock blocks until the lease is acquired or ctx ends.
func (l *lease) lock(ctx context.Context, d time.Duration) (string, error) {
	expectPayload(l.c.t, l.c.call("KEYNOTIFY", l.name), "+OK\r\n")
	defer l.c.call("KEYNOTIFY", l.name, "STOP")
	for {
		tok, err := l.try(d)
		if !errors.Is(err, errNoLease) {
			return tok, err
		}
		if err := l.waitDelete(ctx); err != nil {
			return "", err
		}
	}
}

func (l *lease) waitDelete(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n := <-l.c.notes:
			if string(n.key) == l.name && n.op == resp.OpDelete {
				return nil
			}
		}
	}
}

// edit is the SDK's Edit: fn maps the current value to the new one, or
// keep=false to delete.
func (l *lease) edit(ctx context.Context, key string, d time.Duration, fn func(old string, exists bool) (string, bool)) error {
	for {
		tok, err := l.lock(ctx, d)
		if err != nil {
			return err
		}
		get := l.c.call("GET", key)
		nv, keep := fn(string(get.reply.Str), get.hasTS)
		var r result
		done := ""
		if keep {
			r, done = l.c.do(tok, "SET", key, nv), "+OK\r\n"
		} else {
			r, done = l.c.do(tok, "DEL", key), ":1\r\n"
		}
		l.release()
		if string(r.payload) == done {
			return nil
		}
		if r.reply.Kind == resp.KindError {
			return fmt.Errorf("edit %s: %s", key, r.reply.Str)
		}
	}
}

func TestP27_LeaseHolderAcquireRelease(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	for _, session := range []string{"", "session-7"} {
		l := newLease(c, "lease-"+session, session)
		if h, held := l.holderOf(); held {
			t.Fatalf("fresh lease held by %q", h)
		}
		if _, err := l.try(time.Minute); err != nil {
			t.Fatal(err)
		}
		if h, held := l.holderOf(); !held || h != l.holder {
			t.Fatalf("holder %q held=%v, want %q", h, held, l.holder)
		}
		other := newLease(dial(t, b), l.name, "")
		if _, err := other.try(time.Minute); !errors.Is(err, errNoLease) {
			t.Fatalf("second holder: %v, want errNoLease", err)
		}
		other.release() // VDEL with someone else's value changes nothing
		if h, held := l.holderOf(); !held || h != l.holder {
			t.Fatalf("after a foreign release: holder %q held=%v", h, held)
		}
		l.release()
		if h, held := l.holderOf(); held {
			t.Fatalf("released lease held by %q", h)
		}
	}
}

func TestP28_SecondLockAfterExpiryHasLargerToken(t *testing.T) {
	b := brokertest.Start(t)
	first := newLease(dial(t, b), "lock", "")
	tok1, err := first.try(300 * time.Millisecond) // held, never renewed
	if err != nil {
		t.Fatal(err)
	}
	second := newLease(dial(t, b), "lock", "")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	tok2, err := second.lock(ctx, time.Minute)
	if err != nil {
		t.Fatalf("second Lock: %v", err)
	}
	later(t, tok1, tok2)
	if h, held := second.holderOf(); !held || h != second.holder {
		t.Fatalf("holder %q held=%v", h, held)
	}
}

func TestP29_EditUnderLock(t *testing.T) {
	b := brokertest.Start(t)
	a := newLease(dial(t, b), "edit-lock", "")
	a.c.call("SET", "counter", "1")
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var seen string
	err := a.edit(ctx, "counter", time.Minute, func(old string, exists bool) (string, bool) {
		seen = old
		n, _ := strconv.Atoi(old)
		return strconv.Itoa(n + 1), true
	})
	if err != nil || seen != "1" {
		t.Fatalf("edit: %v (read %q)", err, seen)
	}
	expectPayload(t, a.c.call("GET", "counter"), bulk("2"))
	// The write was fenced with the lock token.
	expectPayload(t, a.c.call("SET", "counter", "x"), errText(wire.ErrTextMissingFencingToken))

	// A waiter on a lease held for 10 s gives up at its deadline.
	holder := newLease(dial(t, b), "edit-lock", "")
	if _, err := holder.try(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	waiter := newLease(dial(t, b), "edit-lock", "")
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	called := false
	err = waiter.edit(short, "counter", time.Minute, func(string, bool) (string, bool) {
		called = true
		return "clobbered", true
	})
	if !errors.Is(err, context.DeadlineExceeded) || called {
		t.Fatalf("waiter edit: %v (fn called %v), want deadline exceeded", err, called)
	}
	expectPayload(t, a.c.call("GET", "counter"), bulk("2"))
}

func TestP30_ConcurrentClientsLinearizable(t *testing.T) {
	const clients, increments = 6, 20
	b := brokertest.Start(t)
	cs := make([]*client, clients)
	for i := range cs {
		cs[i] = dial(t, b)
	}

	// Concurrent SET NX on one key: exactly one +OK; every :-1 carries the
	// winner's version.
	results := make([]result, clients)
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.tryCall("SET", "race", c.id, "NX")
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	winners := 0
	var winTS string
	for _, r := range results {
		if string(r.payload) == "+OK\r\n" {
			winners++
			winTS = r.ts
		}
	}
	if winners != 1 {
		t.Fatalf("%d SET NX winners, want 1", winners)
	}
	for _, r := range results {
		if r.ts != winTS {
			t.Fatalf("version %q, want the winner's %q", r.ts, winTS)
		}
	}

	// A counter incremented with compare-and-delete (VDEL old, then SET new):
	// exactly clients*increments increments land. Meanwhile one client
	// watches the key and, from its notification handler goroutine, issues
	// more requests on the same connection.
	cs[0].call("SET", "ctr", "0")
	expectPayload(t, cs[0].call("KEYNOTIFY", "ctr"), "+OK\r\n")
	var nested atomic.Int64
	stopWatch := make(chan struct{})
	watchDone := make(chan struct{})
	go func() {
		defer close(watchDone)
		for {
			select {
			case <-stopWatch:
				return
			case n := <-cs[0].notes:
				if string(n.key) == "ctr" {
					r, err := cs[0].tryCall("GET", "ctr")
					if err != nil || (r.reply.Kind != resp.KindBulk && r.reply.Kind != resp.KindNil) {
						t.Errorf("nested GET: %q %v", r.payload, err)
						return
					}
					nested.Add(1)
				}
			}
		}
	}()
	versions := make(chan string, clients*increments)
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < increments; {
				get, err := c.tryCall("GET", "ctr")
				if err != nil {
					t.Error(err)
					return
				}
				if get.reply.Kind != resp.KindBulk {
					continue // someone is between its VDEL and SET
				}
				vdel, err := c.tryCall("VDEL", "ctr", string(get.reply.Str))
				if err != nil {
					t.Error(err)
					return
				}
				if string(vdel.payload) != ":1\r\n" {
					continue
				}
				n, _ := strconv.Atoi(string(get.reply.Str))
				set, err := c.tryCall("SET", "ctr", strconv.Itoa(n+1))
				if err != nil || string(set.payload) != "+OK\r\n" {
					t.Errorf("SET after winning VDEL: %q %v", set.payload, err)
					return
				}
				versions <- set.ts
				done++
			}
		}()
	}
	wg.Wait()
	close(stopWatch)
	<-watchDone
	close(versions)
	expectPayload(t, cs[1].call("GET", "ctr"), bulk(strconv.Itoa(clients*increments)))
	seen := map[string]bool{}
	for v := range versions {
		if seen[v] {
			t.Fatalf("version %s issued twice", v)
		}
		seen[v] = true
	}
	if nested.Load() == 0 {
		t.Fatal("no nested request was made from the notification handler")
	}

	// A counter under a lease (SET NEX PX, write fenced with the token,
	// VDEL): mutual exclusion means no increment is lost.
	const locked = 10
	cs[0].call("SET", "ctr2", "0")
	for _, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for done := 0; done < locked; {
				lock, err := c.tryCall("SET", "ctr2-lock", c.id, "NEX", "PX", "10000")
				if err != nil {
					t.Error(err)
					return
				}
				if string(lock.payload) != "+OK\r\n" {
					continue
				}
				get, err := c.tryCall("GET", "ctr2")
				if err != nil {
					t.Error(err)
					return
				}
				n, _ := strconv.Atoi(string(get.reply.Str))
				p := c.request(resp.EncodeRequest([]byte("SET"), []byte("ctr2"), []byte(strconv.Itoa(n+1))))
				p.Properties.User.Add(wire.PropFencingToken, lock.ts)
				ctx, cancel := contextWait()
				set, _, err := c.exchange(ctx, p)
				cancel()
				if err != nil || string(set.payload) != "+OK\r\n" {
					t.Errorf("fenced SET under the lease: %q %v", set.payload, err)
					return
				}
				if _, err := c.tryCall("VDEL", "ctr2-lock", c.id); err != nil {
					t.Error(err)
					return
				}
				done++
			}
		}()
	}
	wg.Wait()
	expectPayload(t, cs[2].call("GET", "ctr2"), bulk(strconv.Itoa(clients*locked)))
}
