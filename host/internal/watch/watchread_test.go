package watch

import (
	"context"
	"log/slog"
	"testing"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// countingStore is a Store of one key whose calls are counted.
type countingStore struct {
	value             protocol.GetResult
	gets, keynotifies int
}

func (s *countingStore) Get(context.Context, []byte, protocol.CallOptions) (protocol.GetResult, error) {
	s.gets++
	return s.value, nil
}

func (s *countingStore) KeyNotify(context.Context, []byte, protocol.CallOptions) error {
	s.keynotifies++
	return nil
}

func (s *countingStore) KeyNotifyStop(context.Context, []byte, protocol.CallOptions) (bool, error) {
	return true, nil
}

// WatchRead registers a key once, as Watch does, and returns the read it
// made then (the key's state once registered); a key registered before is
// not read again, and says so.
func TestWatchReadReturnsTheRegistrationsRead(t *testing.T) {
	st := &countingStore{value: protocol.GetResult{Found: true, Value: []byte("v"), Version: hlc.HLC{Wall: 1, Node: "n"}}}
	g := New(st, slog.Default())
	ctx := context.Background()
	res, read, err := g.WatchRead(ctx, &countWatcher{}, "k")
	if err != nil || !read || string(res.Value) != "v" || st.keynotifies != 1 || st.gets != 1 {
		t.Fatalf("first WatchRead: %+v read %t %v; %d KEYNOTIFY, %d GET", res, read, err, st.keynotifies, st.gets)
	}
	if _, read, err := g.WatchRead(ctx, &countWatcher{}, "k"); err != nil || read || st.keynotifies != 1 || st.gets != 1 {
		t.Fatalf("second WatchRead: read %t %v; %d KEYNOTIFY, %d GET (want no more)", read, err, st.keynotifies, st.gets)
	}
	if n := g.WatchedKeys(); n != 1 {
		t.Fatalf("%d keys registered, want 1", n)
	}
}
