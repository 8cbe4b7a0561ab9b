package host

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
)

// handleRecorder is an Observer that counts what it is told, per rule.
type handleRecorder struct {
	mu             sync.Mutex
	calls, failed  map[string]int
	negativeLength bool
}

func (r *handleRecorder) ObserveHandle(rule string, took time.Duration, failed bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.calls == nil {
		r.calls, r.failed = map[string]int{}, map[string]int{}
	}
	r.calls[rule]++
	if failed {
		r.failed[rule]++
	}
	if took < 0 {
		r.negativeLength = true
	}
}

func (r *handleRecorder) counts(rule string) (calls, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[rule], r.failed[rule]
}

// The observer is told about every handler call with its result, and
// RuleStatus.Queued shows the events waiting in a busy rule's mailbox.
func TestObserverAndQueued(t *testing.T) {
	rec := &handleRecorder{}
	e := newEnv(t, func(o *Config) {
		o.Observer = rec
		o.Rules = map[string]RuleConfig{"slow.gorule": {Mailbox: 8, Timeout: 30 * time.Second}}
	})
	release := make(chan struct{})
	started := make(chan struct{}, 16)
	e.load("slow", goRule{init: watchInit("seq"), handle: func(ctx context.Context, _ abi.Host, ev abi.Event) error {
		started <- struct{}{}
		if string(ev.Value) == "0" {
			<-release
		}
		return nil
	}})
	e.load("bad", goRule{init: watchInit("b"), handle: func(context.Context, abi.Host, abi.Event) error {
		return errors.New("boom")
	}})
	e.set("seq", "0")
	<-started
	for i := 1; i <= 3; i++ {
		e.set("seq", strconv.Itoa(i))
	}
	waitFor(t, "3 events queued behind the blocked one", func() bool { return e.status("slow").Queued == 3 })
	close(release)
	waitFor(t, "queue drained", func() bool { s := e.status("slow"); return s.Handled == 4 && s.Queued == 0 })
	e.set("b", "x")
	e.set("b", "y")
	waitFor(t, "bad rule failed twice", func() bool { return e.status("bad").Failed == 2 })
	if calls, failed := rec.counts("slow.gorule"); calls != 4 || failed != 0 {
		t.Fatalf("slow rule observed: %d calls, %d failed; want 4, 0", calls, failed)
	}
	if calls, failed := rec.counts("bad.gorule"); calls != 2 || failed != 2 {
		t.Fatalf("bad rule observed: %d calls, %d failed; want 2, 2", calls, failed)
	}
	if rec.negativeLength {
		t.Fatal("a negative duration was observed")
	}
}

// Stats.LoadFailed counts rule files of which no version runs because their
// load failed: not a failed reload (the old version runs), and no longer
// once the file is fixed or removed.
func TestStatsLoadFailed(t *testing.T) {
	e := newEnv(t)
	good := e.load("good", goRule{init: watchInit("k")})
	broken := filepath.Join(e.dir, "broken.gorule")
	e.write(broken, "no-such-rule")
	if err := e.host.Load(e.ctx(), broken); err == nil {
		t.Fatal("loading a broken rule: want an error")
	}
	if n := e.host.Stats().LoadFailed; n != 1 {
		t.Fatalf("LoadFailed = %d after a broken rule, want 1", n)
	}
	e.write(good, "no-such-rule")
	if err := e.host.Load(e.ctx(), good); err == nil {
		t.Fatal("reloading a broken version: want an error")
	}
	if n := e.host.Stats().LoadFailed; n != 1 {
		t.Fatalf("LoadFailed = %d after a failed reload (old version runs), want 1", n)
	}
	e.rt.register("broken", goRule{init: watchInit("k")})
	e.reload(broken, "broken")
	if n := e.host.Stats().LoadFailed; n != 0 {
		t.Fatalf("LoadFailed = %d once fixed, want 0", n)
	}
	// A broken file that is deleted (as the folder watcher sees it) is no
	// longer counted.
	gone := filepath.Join(e.dir, "gone.gorule")
	e.write(gone, "no-such-rule")
	e.host.reconcile(e.ctx(), gone)
	if n := e.host.Stats().LoadFailed; n != 1 {
		t.Fatalf("LoadFailed = %d after a broken new file, want 1", n)
	}
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}
	e.host.reconcile(e.ctx(), gone)
	if n := e.host.Stats().LoadFailed; n != 0 {
		t.Fatalf("LoadFailed = %d once the broken file is deleted, want 0", n)
	}
}
