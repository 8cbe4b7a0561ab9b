package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/testutil"
)

// LoadDir starts up to Config.LoadConcurrency rules at once, no more: the
// first four rules' starts each wait until four are in progress (a serial
// LoadDir never gets there and the starts time out), and the most starts
// seen in progress is four. Rule i watches keys k<i> and k<i+1>, so
// neighbours register shared keys at the same time: each key is
// registered once, and every rule gets the change of each of its keys.
func TestLoadDirLoadsConcurrently(t *testing.T) {
	const conc, rules = 4, 12
	e := newEnv(t, func(c *Config) { c.LoadConcurrency = conc })
	var mu sync.Mutex
	inFlight, most, arrived := 0, 0, 0
	all := make(chan struct{}) // closed when conc starts are in progress
	var handled [rules]atomic.Int64
	for i := range rules {
		name := fmt.Sprintf("r%02d", i)
		e.rt.register(name, goRule{init: func(ctx context.Context, h abi.Host) error {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			arrived++
			if arrived == conc {
				close(all)
			}
			first := arrived <= conc
			mu.Unlock()
			defer func() {
				mu.Lock()
				inFlight--
				mu.Unlock()
			}()
			if first {
				select {
				case <-all:
				case <-time.After(testutil.WaitBound / 3):
					return fmt.Errorf("rule %s: %d starts in progress at once, want %d", name, inFlight, conc)
				}
			}
			return watchInit(fmt.Sprintf("k%d", i), fmt.Sprintf("k%d", i+1))(ctx, h)
		}, handle: func(context.Context, abi.Host, abi.Event) error { handled[i].Add(1); return nil }})
		e.writeRule(name+".gorule", []byte(name))
	}
	if err := e.host.LoadDir(e.ctx(), e.dir); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	if most != conc {
		t.Errorf("at most %d rules started at once, want %d", most, conc)
	}
	mu.Unlock()
	if n := e.host.Stats().WatchedKeys; n != rules+1 {
		t.Fatalf("%d keys registered, want %d", n, rules+1)
	}
	for k := range rules + 1 {
		e.set(fmt.Sprintf("k%d", k), "v")
	}
	// rule i handles k<i> and k<i+1>
	waitFor(t, "every rule to handle both its keys", func() bool {
		for i := range rules {
			if handled[i].Load() != 2 {
				return false
			}
		}
		return true
	})
}

// A folder of many rules with broken and hostile ones among them: a file
// that does not compile, one whose start fails, one whose start never
// returns (until its load times out), and files that are no rules. The
// others load; LoadDir's error names exactly the failed files, in name
// order; Status lists them as failed to load, the rest running.
func TestLoadDirIsolatesFailuresAmongMany(t *testing.T) {
	const rules = 40
	e := newEnv(t, func(c *Config) {
		c.LoadConcurrency = 4
		c.LoadTimeout = 500 * time.Millisecond
		c.Defaults.Grace = 500 * time.Millisecond
	})
	e.rt.register("fails", goRule{init: func(context.Context, abi.Host) error { return errors.New("refusing to start") }})
	e.rt.register("hangs", goRule{init: func(ctx context.Context, _ abi.Host) error {
		<-ctx.Done()
		return ctx.Err()
	}})
	var good, bad []string
	for i := range rules {
		name := fmt.Sprintf("r%02d", i)
		switch i {
		case 7:
			bad = append(bad, e.writeRule(name+".gorule", []byte("no-such-rule")))
		case 13:
			bad = append(bad, e.writeRule(name+".gorule", []byte("fails")))
		case 21:
			bad = append(bad, e.writeRule(name+".gorule", []byte("hangs")))
		default:
			e.rt.register(name, goRule{init: watchInit("shared", "own/"+name)})
			good = append(good, e.writeRule(name+".gorule", []byte(name)))
		}
	}
	if err := os.WriteFile(filepath.Join(e.dir, "notes.txt"), []byte("not a rule"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.dir, "plugin"), []byte("not executable"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := e.host.LoadDir(e.ctx(), e.dir)
	if err == nil {
		t.Fatal("LoadDir returned no error with three broken rules")
	}
	msg := err.Error()
	at := -1
	for _, p := range bad {
		i := strings.Index(msg, p)
		if i < 0 {
			t.Errorf("LoadDir's error does not name %s: %v", p, err)
		} else if i < at {
			t.Errorf("LoadDir's error names %s out of name order: %v", p, err)
		}
		at = max(at, i)
	}
	for _, p := range good {
		if strings.Contains(msg, p+":") || strings.Contains(msg, p+" ") {
			t.Errorf("LoadDir's error names %s, which loaded: %v", p, err)
		}
	}
	for _, p := range good {
		if s := e.statusOf(p); s.State != StateRunning {
			t.Errorf("%s: state %q, want %q", p, s.State, StateRunning)
		}
	}
	for _, p := range bad {
		if s := e.statusOf(p); s.State != StateLoadFailed || s.LastError == "" {
			t.Errorf("%s: state %q (error %q), want %q with the error", p, s.State, s.LastError, StateLoadFailed)
		}
	}
	if n, want := len(e.host.Status()), rules; n != want {
		t.Errorf("Status lists %d files, want %d", n, want)
	}
	if got, want := e.host.Stats().WatchedKeys, 1+len(good); got != want {
		t.Errorf("%d keys registered, want %d (shared, and one per loaded rule)", got, want)
	}
}

// A LoadDir whose context ends stops starting files: the rules started
// load or fail, those not started are not loaded, and the error says the
// context ended.
func TestLoadDirStopsWhenContextEnds(t *testing.T) {
	const rules = 10
	e := newEnv(t, func(c *Config) { c.LoadConcurrency = 1 })
	ctx, cancel := context.WithCancel(e.ctx())
	defer cancel()
	for i := range rules {
		name := fmt.Sprintf("r%02d", i)
		init := watchInit("k/" + name)
		if i == 3 {
			init = func(context.Context, abi.Host) error { cancel(); return nil } // loads: it started before the end
		}
		e.rt.register(name, goRule{init: init})
		e.writeRule(name+".gorule", []byte(name))
	}
	err := e.host.LoadDir(ctx, e.dir)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("LoadDir after its context ended: %v, want context.Canceled", err)
	}
	var loaded []string
	for _, s := range e.host.Status() {
		loaded = append(loaded, filepath.Base(s.Path))
		if s.State != StateRunning && s.State != StateLoadFailed {
			t.Errorf("%s: state %q", s.Path, s.State)
		}
	}
	if len(loaded) > 4 {
		t.Errorf("rules %v loaded or tried after the context ended (r00..r03 only)", loaded)
	}
}
