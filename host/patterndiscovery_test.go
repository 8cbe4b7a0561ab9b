package host

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/protocol"
)

// hookStore is the host's store with hooks on the calls of one key: run
// before its KEYNOTIFY is sent, and before its GET is.
type hookStore struct {
	*protocol.Client
	key          string
	onKeyNotify  atomic.Pointer[func()]
	onGet        atomic.Pointer[func()]
	gets, notify atomic.Int32
}

func (s *hookStore) KeyNotify(ctx context.Context, key []byte, opts protocol.CallOptions) error {
	if string(key) == s.key {
		s.notify.Add(1)
		if f := s.onKeyNotify.Load(); f != nil {
			(*f)()
		}
	}
	return s.Client.KeyNotify(ctx, key, opts)
}

func (s *hookStore) Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error) {
	if string(key) == s.key {
		s.gets.Add(1)
		if f := s.onGet.Load(); f != nil {
			(*f)()
		}
	}
	return s.Client.Get(ctx, key, opts)
}

// A key a rule of the host writes reaches a rule whose pattern matches it
// once the key is registered, from what the writer stored: before any read
// of the key (one round trip after the write, not two). The read that
// follows still finds a write another client made between the rule's write
// and the registration, which no notification reports, and the rule gets
// that too: nothing is missed for the round trip saved.
func TestPatternKeyWrittenByARuleNeedsNoReadFirst(t *testing.T) {
	hs := &hookStore{key: "dev/7"}
	e := newEnv(t, func(o *Config) {
		hs.Client = o.Store.(*protocol.Client)
		o.Store = hs
	})
	var a handled
	e.load("a", patternRule(&a, "dev/*", abi.WatchOptions{}))
	e.load("w", goRule{
		init: func(ctx context.Context, h abi.Host) error { return h.Watch(ctx, "make", abi.WatchOptions{}) },
		handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
			_, err := h.Set(ctx, "dev/"+string(ev.Value), []byte("new"), abi.SetOptions{})
			return err
		},
	})
	// Between the rule's write and the key's registration, another client
	// writes the key: the store sends the host no notification of it.
	outside := func() { // on the host's goroutine: no t.Fatal
		if _, err := e.user.Set(context.Background(), []byte("dev/7"), []byte("outside"), protocol.SetOptions{}); err != nil {
			t.Errorf("the outside write: %v", err)
		}
	}
	hs.onKeyNotify.Store(&outside)
	// The host's read of the key waits until rule a has the rule's write:
	// had the host read the key before giving it, this would time out.
	var givenBeforeRead atomic.Bool
	waitGiven := func() {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if len(a.snapshot()) > 0 {
				givenBeforeRead.Store(true)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	hs.onGet.Store(&waitGiven)
	e.set("make", "7")
	waitFor(t, "the rule's write, then the outside write", func() bool { return len(a.snapshot()) == 2 })
	wantHandled(t, &a, "rule a", "SET dev/7=new resync", "SET dev/7=outside resync")
	if !givenBeforeRead.Load() {
		t.Error("rule a got the key only after the host read it: two round trips after the write, want one")
	}
	if n, g := hs.notify.Load(), hs.gets.Load(); n != 1 || g != 1 {
		t.Errorf("%d KEYNOTIFY and %d GET of dev/7, want 1 and 1 (the read after the key was given)", n, g)
	}
	e.set("dev/7", "later")
	waitFor(t, "a later change", func() bool { return len(a.snapshot()) == 1 })
	wantHandled(t, &a, "a later change", "SET dev/7=later")
}
