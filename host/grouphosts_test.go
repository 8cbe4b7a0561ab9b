package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// cluster is a harness for groups: N hosts, each a goroutine with its own
// client reaching one embedded broker through its own proxy (so a test can
// cut, delay or heal one host's connection), all running the same rule files
// from one folder. Rule rNN watches in/rNN and writes its value to out/rNN;
// each handling is recorded with the host that did it.
type cluster struct {
	t     testing.TB
	addr  string
	user  *protocol.Client
	dir   string
	group GroupConfig
	rules []string

	mu      sync.Mutex
	changed *sync.Cond
	members []*member
	// handled[rule][value] lists the hosts (indexes) whose rule wrote value
	// to the rule's output key: more than one entry is an event handled
	// twice.
	handled map[string]map[string][]int
	writes  int // values written to the rules' input keys
	// beforeWrite, when set, is called by a handler before its write.
	beforeWrite func(host int, rule string)
	// failed lists the errors of the handlers' writes, by host.
	failed map[int][]error
	// custom, when it has a rule's name, gives that rule's Go rule on
	// host i instead of the handler below (set before start). A name
	// that is not one of rules is a rule file's content (a version of a
	// rule, see files).
	custom map[string]func(i int) goRule
	// files, when set, gives host i's rule folder: file name -> content
	// (a rule's name, or a name custom has), instead of the shared one
	// (set before start).
	files func(i int) map[string]string
	// logs collects every host's log.
	logs testutil.Buffer
	// rulesCfg is every host's Config.Rules (set before start).
	rulesCfg map[string]RuleConfig
	// settledAt is when settled last found the group settled: just after
	// its first look, before the steps that confirm it (the test's
	// goroutine's).
	settledAt time.Time
}

// member is one host of a cluster.
type member struct {
	i      int
	proxy  *testnet.Proxy
	client *protocol.Client
	host   *Host
	dir    string // its rule folder
}

// newCluster starts a broker and writes n rule files; no host yet. Options
// (e.g. Config.Rules) apply to every host.
func newCluster(t testing.TB, n int, ttl time.Duration) *cluster {
	t.Helper()
	b := brokertest.Start(t)
	c := &cluster{t: t, addr: b.Addr(), dir: t.TempDir(), group: GroupConfig{Name: "g", TTL: ttl},
		handled: map[string]map[string][]int{}, failed: map[int][]error{}}
	c.changed = sync.NewCond(&c.mu)
	c.user = newClient(t, c.addr)
	for i := range n {
		name := fmt.Sprintf("r%02d", i)
		c.rules = append(c.rules, name)
		if err := os.WriteFile(filepath.Join(c.dir, name+".gorule"), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// start adds a host to the cluster and loads the rules folder.
func (c *cluster) start() *member {
	c.t.Helper()
	c.mu.Lock()
	m := &member{i: len(c.members)}
	c.members = append(c.members, m)
	c.mu.Unlock()
	m.proxy = testnet.NewProxy(c.t, c.addr)
	m.client = newClient(c.t, m.proxy.Addr())
	rt := &goRuntime{}
	for _, name := range c.rules {
		if f := c.custom[name]; f != nil {
			rt.register(name, f(m.i))
			continue
		}
		rt.register(name, goRule{init: watchInit("in/" + name), handle: c.handler(m.i, name)})
	}
	for name, f := range c.custom {
		if !slices.Contains(c.rules, name) {
			rt.register(name, f(m.i))
		}
	}
	dir := c.dir
	if c.files != nil {
		dir = c.t.TempDir()
		for name, content := range c.files(m.i) {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
				c.t.Fatal(err)
			}
		}
	}
	m.dir = dir
	// A long call timeout: a store stalled for a second on a loaded machine
	// must not fail a handler (a failed handler's event is not retried).
	h, err := New(Config{Store: m.client, Runtimes: []abi.Runtime{rt}, Group: &c.group, Defaults: RuleConfig{Timeout: 20 * time.Second}, Rules: c.rulesCfg,
		Logger: slog.New(slog.NewTextHandler(io.MultiWriter(testutil.LogWriter(c.t), &c.logs), &slog.HandlerOptions{Level: slog.LevelInfo})).With("host", m.i)})
	if err != nil {
		c.t.Fatal(err)
	}
	m.host = h
	testutil.CloseAtEnd(c.t, fmt.Sprintf("host %d", m.i), h.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.LoadDir(ctx, dir); err != nil {
		c.t.Fatal(err)
	}
	return m
}

// handler is rule name's handler on host i: it writes the value of in/NAME,
// with "@i", to out/NAME and records the handling once the write is
// accepted.
func (c *cluster) handler(i int, name string) func(context.Context, abi.Host, abi.Event) error {
	return func(ctx context.Context, h abi.Host, ev abi.Event) error {
		if ev.Op != abi.OpSet {
			return nil
		}
		c.mu.Lock()
		before := c.beforeWrite
		c.mu.Unlock()
		if before != nil {
			before(i, name)
		}
		if _, err := h.Set(ctx, "out/"+name, fmt.Appendf(nil, "%s@%d", ev.Value, i), abi.SetOptions{}); err != nil {
			c.mu.Lock()
			c.failed[i] = append(c.failed[i], err)
			c.changed.Broadcast()
			c.mu.Unlock()
			return err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.handled[name] == nil {
			c.handled[name] = map[string][]int{}
		}
		c.handled[name][string(ev.Value)] = append(c.handled[name][string(ev.Value)], i)
		c.changed.Broadcast()
		return nil
	}
}

// waitHandled waits until rule handled value, for at most bound, and
// reports whether it did.
func (c *cluster) waitHandled(rule, value string, bound time.Duration) bool {
	stop := time.AfterFunc(bound, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.changed.Broadcast()
	})
	defer stop.Stop()
	deadline := time.Now().Add(bound)
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.handled[rule][value]) == 0 {
		if !time.Now().Before(deadline) {
			return false
		}
		c.changed.Wait()
	}
	return true
}

// owners returns, per rule, the hosts that say they own it and run it
// (live ones only: a cut host's view is stale until it learns it lost its
// rules). A host owns a rule a moment before it has loaded it: until then
// the rule watches nothing, and a write made meanwhile to a rule's first
// run in the group is not an event for it (it starts from the keys'
// state, as a rule a host loads does), so tests wait for running rules.
func (c *cluster) owners(skip ...*member) map[string][]int {
	out := map[string][]int{}
	c.mu.Lock()
	ms := append([]*member(nil), c.members...)
	c.mu.Unlock()
	for _, m := range ms {
		if containsMember(skip, m) {
			continue
		}
		running := map[string]bool{}
		for _, st := range m.host.Status() {
			running[filepath.Base(st.Path)] = st.State == StateRunning
		}
		gs, _ := m.host.Group()
		for _, r := range gs.Owned {
			if !running[r] {
				continue
			}
			r = strings.TrimSuffix(r, ".gorule")
			out[r] = append(out[r], m.i)
		}
	}
	return out
}

func containsMember(ms []*member, m *member) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

// settled reports whether the group has settled: the hosts not skipped all
// see each other as the live members, each one's roster line names its rule
// set as it is now, every rule is owned by exactly one of them, none owns
// more than max, and all of that still holds, the owners unchanged, once
// each of them has run a step of its loop begun after it was seen.
//
// Seeing each other is not enough: a host joins the group (New starts its
// loop) before its LoadDir has recorded its rules, so for a moment its
// roster line offers none, and the others, seeing it live, keep every rule
// and report it as a member; once its set is published, the assignment may
// move a rule to it. A step begun once every set is published assigns the
// rules from those sets, so an owner that kept its rules through one keeps
// them (the sets stay as they are until a test changes a host's files).
func (c *cluster) settled(max int, skip ...*member) bool {
	c.t.Helper()
	own, live, ok := c.settledNow(max, skip...)
	if !ok {
		return false
	}
	at := time.Now()
	steps(c.t, live, 2) // the second begun after this check (the first may have been under way)
	again, _, ok := c.settledNow(max, skip...)
	if !ok || !maps.EqualFunc(own, again, slices.Equal[[]int]) {
		return false
	}
	c.settledAt = at
	return true
}

// settledNow is settled without the steps: it returns the owners and the
// hosts not skipped.
func (c *cluster) settledNow(max int, skip ...*member) (map[string][]int, []*member, bool) {
	c.mu.Lock()
	ms := append([]*member(nil), c.members...)
	c.mu.Unlock()
	var live []*member
	for _, m := range ms {
		if containsMember(skip, m) {
			continue
		}
		live = append(live, m)
		if gs, _ := m.host.Group(); len(gs.Members) != len(ms)-len(skip) {
			return nil, nil, false
		}
	}
	if !c.published(live) {
		return nil, nil, false
	}
	own := c.owners(skip...)
	per := map[int]int{}
	for _, r := range c.rules {
		if len(own[r]) != 1 {
			return nil, nil, false
		}
		per[own[r][0]]++
	}
	for _, n := range per {
		if n > max {
			return nil, nil, false
		}
	}
	return own, live, true
}

// published reports whether the roster names, for each of ms, its rule set
// as it is now.
func (c *cluster) published(ms []*member) bool {
	if len(ms) == 0 {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.user.Get(ctx, []byte(ReservedPrefix+"group/"+c.group.Name+"/roster"), protocol.CallOptions{})
	if err != nil {
		return false
	}
	entries, _ := membership.ParseRoster(res.Value)
	for _, m := range ms {
		gs, _ := m.host.Group()
		e, ok := membership.EntryOf(entries, gs.Member)
		if digest := m.host.group.Digest(); !ok || e.Digest != digest {
			return false
		}
	}
	return true
}

// drive writes in/RULE = 1..rounds for every rule, each write only once the
// previous value was handled (so no write supersedes one not yet handled),
// calling between(round) after each round. A value not handled within
// bound fails the test.
func (c *cluster) drive(rounds int, bound time.Duration, between func(round int)) {
	c.t.Helper()
	for round := 1; round <= rounds; round++ {
		var wg sync.WaitGroup
		errs := make(chan string, len(c.rules))
		for _, r := range c.rules {
			wg.Go(func() {
				v := strconv.Itoa(round)
				ctx, cancel := context.WithTimeout(context.Background(), bound)
				defer cancel()
				if _, err := c.user.Set(ctx, []byte("in/"+r), []byte(v), protocol.SetOptions{}); err != nil {
					errs <- fmt.Sprintf("set in/%s: %v", r, err)
					return
				}
				c.mu.Lock()
				c.writes++
				c.mu.Unlock()
				if !c.waitHandled(r, v, bound) {
					errs <- fmt.Sprintf("rule %s did not handle %s within %v", r, v, bound)
				}
			})
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			c.t.Error(e)
		}
		if c.t.Failed() {
			c.t.FailNow()
		}
		if between != nil {
			between(round)
		}
	}
}

// duplicates counts the values handled more than once, and checks that
// every value written was handled.
func (c *cluster) duplicates(rounds int) int {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	dup := 0
	for _, r := range c.rules {
		for round := 1; round <= rounds; round++ {
			n := len(c.handled[r][strconv.Itoa(round)])
			if n == 0 {
				c.t.Errorf("rule %s never handled %d", r, round)
			}
			dup += max(n-1, 0)
		}
	}
	return dup
}

// handledBy returns the hosts whose rule handled value.
func (c *cluster) handledBy(rule, value string) []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int(nil), c.handled[rule][value]...)
}
