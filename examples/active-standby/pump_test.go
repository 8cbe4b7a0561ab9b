package activestandby_test

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/examples/internal/examplehost"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/runtime/lua"
)

// Two hosts run this folder against one store. The first to see a reading
// becomes active and drives the pump; the second stands by. The active
// host's connection is cut: its lease expires, the standby takes over with
// a larger fencing token, and when the old active comes back it stands by.
// Every value of pump/owner the store applied is recorded: the old active's
// writes never land after the new one's.
func TestActiveStandbyFailover(t *testing.T) {
	b := brokertest.Start(t)
	px := testnet.NewProxy(t, b.Addr())
	user := examplehost.Client(t, b.Addr(), "pump-user", fastRetry)
	owners := observe(t, b.Addr(), "pump/owner")

	// a reaches the store through the proxy, so its connection can be cut;
	// it retries quickly once the proxy is back.
	a := startHost(t, "a", examplehost.Client(t, px.Addr(), "pump-a", fastRetry))
	set := func(key, value string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := user.Set(ctx, []byte(key), []byte(value), protocol.SetOptions{}); err != nil {
			t.Fatalf("set %s: %v", key, err)
		}
	}
	get := func(key string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		res, err := user.Get(ctx, []byte(key), protocol.CallOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", key, err)
		}
		return string(res.Value)
	}

	// a alone: it takes the lease and drives the pump.
	set("tank/level", "30")
	testutil.WaitFor(t, "a active", func() bool { return strings.HasPrefix(get("pump/owner"), "pump-a:pump.lua ") })
	if c := get("pump/command"); c != "on" {
		t.Fatalf("pump/command = %q at 30%%, want on", c)
	}

	// b joins and stands by: a keeps driving.
	bh := startHost(t, "b", examplehost.Client(t, b.Addr(), "pump-b", fastRetry))
	set("tank/level", "70")
	testutil.WaitFor(t, "both instances handle the reading", func() bool { return a.handled() == 2 && bh.handled() == 1 })
	if c, o := get("pump/command"), get("pump/owner"); c != "off" || !strings.HasPrefix(o, "pump-a:pump.lua ") {
		t.Fatalf("after 70%%: command %q, owner %q; want off, driven by a", c, o)
	}

	// a is cut off. Readings keep coming; b takes over once a's lease has
	// expired in the store.
	px.Cut()
	for i := 0; !strings.HasPrefix(get("pump/owner"), "pump-b:pump.lua "); i++ {
		if i == 100 {
			t.Fatal("b never took over")
		}
		before := bh.handled()
		set("tank/level", strconv.Itoa(40+i%20))
		testutil.WaitFor(t, "b handles the reading", func() bool { return bh.handled() > before })
	}

	// a comes back: it learns it lost the lease, and stands by when the
	// next reading comes (live, or re-read after the reconnect).
	handledB := bh.handled()
	px.Heal()
	testutil.WaitFor(t, "a told it lost the lease", func() bool { return strings.Contains(a.logs.String(), "standing by: lost pump/leader") })
	set("tank/level", "21")
	testutil.WaitFor(t, "a stands by", func() bool { return strings.Contains(a.logs.String(), `msg="standby: tank level 21"`) })
	testutil.WaitFor(t, "b handles the last reading", func() bool { return bh.handled() == handledB+1 })
	if c := get("pump/command"); c != "on" {
		t.Fatalf("pump/command = %q at 21%%, want on", c)
	}
	if o := get("pump/owner"); !strings.HasPrefix(o, "pump-b:pump.lua ") {
		t.Fatalf("final owner %q, want b", o)
	}
	for name, h := range map[string]*testHost{"a": a, "b": bh} {
		for _, s := range h.Status() {
			if s.Failed != 0 {
				t.Errorf("%s: %d failed events", name, s.Failed)
			}
		}
	}

	// What the store applied: a's values, then b's, with growing tokens.
	seq := owners()
	var last hlc.HLC
	sawB := false
	for _, v := range seq {
		holder, text, _ := strings.Cut(v, " ")
		tok, err := hlc.Parse(text)
		if err != nil {
			t.Fatalf("pump/owner %q: %v", v, err)
		}
		if tok.Compare(last) < 0 {
			t.Errorf("pump/owner went back to an older token: %v", seq)
		}
		last = tok
		switch holder {
		case "pump-b:pump.lua":
			sawB = true
		case "pump-a:pump.lua":
			if sawB {
				t.Errorf("the old active's write was applied after the new one's: %v", seq)
			}
		default:
			t.Errorf("pump/owner %q: unknown holder", v)
		}
	}
	if len(seq) < 2 || !strings.HasPrefix(seq[0], "pump-a:") || !sawB {
		t.Fatalf("pump/owner history %v: want a's values then b's", seq)
	}
	t.Logf("pump/owner history: %v", seq)
}

// testHost is a host running this folder, with its log.
type testHost struct {
	*host.Host
	logs *testutil.Buffer
}

// handled is how many events the pump rule handled.
func (h *testHost) handled() uint64 {
	var n uint64
	for _, s := range h.Status() {
		n += s.Handled
	}
	return n
}

func startHost(t *testing.T, name string, c *protocol.Client) *testHost {
	t.Helper()
	logs := &testutil.Buffer{}
	lr := lua.New(lua.Config{})
	t.Cleanup(func() { _ = lr.Close(context.Background()) }) // after the host's Close
	h := examplehost.Host(t, host.Config{
		Store:    c,
		Runtimes: []abi.Runtime{lr},
		Logger:   slog.New(slog.NewTextHandler(io.MultiWriter(logs, testutil.LogWriter(t)), &slog.HandlerOptions{Level: slog.LevelDebug})).With("host", name),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.LoadDir(ctx, "."); err != nil {
		t.Fatal(err)
	}
	if n := len(h.Status()); n != 1 {
		t.Fatalf("this folder holds %d rules, want 1", n)
	}
	return &testHost{Host: h, logs: logs}
}

// fastRetry bounds calls to 5 s and retries a lost connection every 50 ms.
func fastRetry(c *protocol.Config) {
	c.Timeout = 5 * time.Second
	c.ReconnectBackoff = func(int) time.Duration { return 50 * time.Millisecond }
}

// observe records every value the store applies to key, in order; the
// returned function returns them so far.
func observe(t *testing.T, addr, key string) func() []string {
	t.Helper()
	c, err := protocol.New(context.Background(), protocol.Config{Servers: []string{addr}, ClientID: "pump-observer",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var values []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range c.Events() {
			if ev.Kind == protocol.EventNotify && ev.Op == protocol.OpSet {
				mu.Lock()
				values = append(values, string(ev.Value))
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { c.Close(); <-done })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.KeyNotify(ctx, []byte(key), protocol.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), values...)
	}
}
