package fsfollow_test

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ssrun/ssrun/internal/fsfollow"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

// A burst of changes is acted on once, after it, with every event seen;
// Settle returns when its context ends.
func TestSettleActsOncePerBurst(t *testing.T) {
	dir := t.TempDir()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	events, quiet := map[string]bool{}, 0
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fsfollow.Settle(ctx, w, time.Hour, // never quiet during the burst, however slow the machine
			func(ev fsnotify.Event) { mu.Lock(); events[filepath.Base(ev.Name)] = true; mu.Unlock() },
			func(err error) { t.Error(err) },
			func() { mu.Lock(); quiet++; mu.Unlock() })
	}()
	for _, name := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the three events", func() bool { mu.Lock(); defer mu.Unlock(); return len(events) == 3 })
	cancel()
	<-done
	if quiet != 0 {
		t.Fatalf("acted %d times within the burst (settle is an hour)", quiet)
	}

	// With a short settle, the burst ends in exactly one action.
	ctx, cancel = context.WithCancel(context.Background())
	acted := make(chan struct{}, 10)
	done = make(chan struct{})
	go func() {
		defer close(done)
		fsfollow.Settle(ctx, w, time.Millisecond, nil, func(err error) { t.Error(err) }, func() { acted <- struct{}{} })
	}()
	defer func() { cancel(); <-done }()
	if err := os.WriteFile(filepath.Join(dir, "d"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-acted:
	case <-time.After(testutil.WaitBound):
		t.Fatal("no action after the change")
	}
}
