package host

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// In mode latest a rule never handles a change that a newer change of its
// key replaced while it waited, even with room in the mailbox; other keys
// keep their order.
func TestModeLatest(t *testing.T) {
	e := newEnv(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"latest.gorule": {Mode: ModeLatest, Timeout: 30 * time.Second}}
	})
	release := make(chan struct{})
	var mu sync.Mutex
	var seen []string
	e.load("latest", goRule{init: watchInit("k", "j"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		mu.Lock()
		seen = append(seen, fmt.Sprintf("%s=%s/%d", ev.Key, ev.Value, ev.Coalesced))
		first := len(seen) == 1
		mu.Unlock()
		if first {
			select {
			case <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}})
	e.set("k", "0")
	waitFor(t, "the rule blocked in its first event", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == 1 })
	for i := 1; i <= 5; i++ {
		e.set("k", strconv.Itoa(i))
		if i == 2 {
			e.set("j", "x")
		}
	}
	waitFor(t, "k's changes conflated", func() bool { return e.status("latest").Coalesced == 4 })
	close(release)
	waitFor(t, "the rule handled what waited", func() bool { return e.status("latest").Handled == 3 })
	mu.Lock()
	defer mu.Unlock()
	if got, want := strings.Join(seen, ","), "k=0/0,k=5/4,j=x/0"; got != want {
		t.Fatalf("handled %s, want %s (k's first waiting change kept its place, replaced by its last)", got, want)
	}
	if st := e.status("latest"); st.Dropped != 0 {
		t.Fatalf("dropped %d", st.Dropped)
	}
}
