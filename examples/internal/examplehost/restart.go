package examplehost

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// Restartable runs one rule folder on a host that a test can stop and
// start again on the same embedded broker (as a restart of ssrun), with a
// user's client to write and read keys and to record the changes of keys.
type Restartable struct {
	t        testing.TB
	ctx      context.Context
	addr     string
	dir      string
	runtimes []abi.Runtime
	config   func(*host.Config) // nil: none
	starts   int
	// User is the user's client (the sensors and the person at the keyboard).
	User *protocol.Client
	// Host is the host running now.
	Host *host.Host

	mu      sync.Mutex
	changes map[string][]protocol.Event // recorded keys' notifications, in order
}

// StartRestartable starts an embedded broker and a host running the rule
// files of dir (exactly one) with runtimes. Everything is closed when the
// test ends. ctx bounds the calls the helpers make.
func StartRestartable(ctx context.Context, t testing.TB, dir string, runtimes ...abi.Runtime) *Restartable {
	t.Helper()
	return StartRestartableWith(ctx, t, dir, nil, runtimes...)
}

// StartRestartableWith is StartRestartable whose hosts config changes
// before they start (the rules' settings, as ssrun.yaml gives them).
func StartRestartableWith(ctx context.Context, t testing.TB, dir string, config func(*host.Config), runtimes ...abi.Runtime) *Restartable {
	t.Helper()
	b := brokertest.Start(t)
	r := &Restartable{t: t, ctx: ctx, addr: b.Addr(), dir: dir, runtimes: runtimes, config: config, changes: map[string][]protocol.Event{}}
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after User's Close (cleanups run last first), which closes Events
	r.User = Client(t, r.addr, "example-user")
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev := range r.User.Events() {
			if ev.Kind == protocol.EventNotify {
				r.mu.Lock()
				r.changes[string(ev.Key)] = append(r.changes[string(ev.Key)], ev)
				r.mu.Unlock()
			}
		}
	}()
	r.start()
	return r
}

// start starts a host on a new client and loads the rules.
func (r *Restartable) start() {
	r.t.Helper()
	r.starts++
	client := Client(r.t, r.addr, fmt.Sprintf("example-host-%d", r.starts))
	cfg := host.Config{Store: client, Runtimes: r.runtimes}
	if r.config != nil {
		r.config(&cfg)
	}
	r.Host = Host(r.t, cfg)
	if err := r.Host.LoadDir(r.ctx, r.dir); err != nil {
		r.t.Fatalf("loading %s: %v", r.dir, err)
	}
	if n := len(r.Host.Status()); n != 1 {
		r.t.Fatalf("%s holds %d rules, want exactly one", r.dir, n)
	}
}

// Restart stops the host, runs while (if not nil) with no host running,
// and starts a new host on the same folder and broker.
func (r *Restartable) Restart(while func()) {
	r.t.Helper()
	if err := r.Host.Close(r.ctx); err != nil {
		r.t.Fatalf("closing host %d: %v", r.starts, err)
	}
	if while != nil {
		while()
	}
	r.start()
}

// Status is the status of the rule on the host running now.
func (r *Restartable) Status() host.RuleStatus { return r.Host.Status()[0] }

// Record starts recording the notifications of key (see Changes).
func (r *Restartable) Record(key string) {
	r.t.Helper()
	if err := r.User.KeyNotify(r.ctx, []byte(key), protocol.CallOptions{}); err != nil {
		r.t.Fatalf("watch %s: %v", key, err)
	}
}

// Changes returns the notifications of a recorded key so far.
func (r *Restartable) Changes(key string) []protocol.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]protocol.Event(nil), r.changes[key]...)
}

// WaitChanges waits until key has had n notifications and returns them.
func (r *Restartable) WaitChanges(key string, n int) []protocol.Event {
	r.t.Helper()
	testutil.WaitFor(r.t, fmt.Sprintf("%d changes of %s", n, key), func() bool { return len(r.Changes(key)) >= n })
	return r.Changes(key)
}

// Set writes key.
func (r *Restartable) Set(key, value string) {
	r.t.Helper()
	if _, err := r.User.Set(r.ctx, []byte(key), []byte(value), protocol.SetOptions{}); err != nil {
		r.t.Fatalf("set %s: %v", key, err)
	}
}

// Get returns key's value, "" when absent.
func (r *Restartable) Get(key string) string {
	r.t.Helper()
	res, err := r.User.Get(r.ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		r.t.Fatalf("get %s: %v", key, err)
	}
	return string(res.Value)
}

// WaitHandled waits until the rule on the running host has handled (or
// failed) n events, and fails the test if any failed or was dropped or it
// handled more.
func (r *Restartable) WaitHandled(n uint64) {
	r.t.Helper()
	testutil.WaitFor(r.t, fmt.Sprintf("%d events handled", n), func() bool {
		st := r.Status()
		return st.Handled+st.Failed >= n
	})
	if st := r.Status(); st.Failed != 0 || st.Dropped != 0 || st.Handled != n {
		r.t.Fatalf("%s: %d handled, %d failed, %d dropped events; want %d handled (see the log)", st.Path, st.Handled, st.Failed, st.Dropped, n)
	}
}

// WaitClock waits until the wall clock has passed ms (Unix milliseconds).
func WaitClock(t testing.TB, ms int64) {
	t.Helper()
	testutil.WaitFor(t, fmt.Sprintf("the clock to pass %d", ms), func() bool { return time.Now().UnixMilli() > ms })
}
