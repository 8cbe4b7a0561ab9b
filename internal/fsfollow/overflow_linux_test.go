package fsfollow_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/fsfollow"
	"github.com/ssrun/ssrun/internal/testutil"
)

// TestOverflowReportsWhatChanged overflows the kernel's inotify queue for
// real (the watcher's events are not read meanwhile), then changes the
// folder, whose events are lost: a file rewritten, one removed, one
// created. Follow, reading on, gets ErrOverflow and must report the three
// all the same.
func TestOverflowReportsWhatChanged(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/fs/inotify/max_queued_events")
	if err != nil {
		t.Skip("inotify queue length unknown:", err)
	}
	queue, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || queue > 1<<17 {
		t.Skipf("inotify queue of %q events: too long to overflow in a test", raw)
	}
	dir := t.TempDir()
	changed, removed, created := filepath.Join(dir, "changed"), filepath.Join(dir, "removed"), filepath.Join(dir, "created")
	for _, p := range []string{changed, removed} {
		if err := os.WriteFile(p, []byte("before"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	w, err := fsfollow.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Add(dir); err != nil {
		t.Fatal(err)
	}
	// Four events a file (create, modify, close, delete); the watcher's
	// reader takes a buffer's worth before it blocks.
	for i := range queue/4 + 4096 {
		p := filepath.Join(dir, fmt.Sprintf("flood-%06d", i))
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(changed, []byte("after, longer"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(removed); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(created, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		reported = map[string]bool{}
		errs     []error
	)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		fsfollow.Follow(ctx, w, fsfollow.Options{
			OpenQuiet: 50 * time.Millisecond, // a file the rescan finds changed, if no close comes
			OnChange: func(paths []string) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range paths {
					reported[p] = true
				}
			},
			OnError: func(err error) {
				mu.Lock()
				defer mu.Unlock()
				errs = append(errs, err)
			},
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	testutil.WaitFor(t, "the overflow reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.ContainsFunc(errs, func(err error) bool { return errors.Is(err, fsfollow.ErrOverflow) })
	})
	testutil.WaitFor(t, "the changes lost in the overflow reported", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return reported[changed] && reported[removed] && reported[created]
	})
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		if !errors.Is(err, fsfollow.ErrOverflow) {
			t.Errorf("unexpected error: %v", err)
		}
	}
}
