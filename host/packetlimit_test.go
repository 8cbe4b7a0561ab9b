package host

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// newEnvBeforeConnect is newEnv, except that the host is made while its
// client cannot reach the broker yet (a proxy refuses it): the host's rule
// settings are taken before the broker's maximum packet size is known, as
// `ssrun run` does when the broker is not up yet. The client connects once
// the host exists.
func newEnvBeforeConnect(t *testing.T, opts ...func(*Config)) *env {
	t.Helper()
	b := brokertest.Start(t)
	px := testnet.NewProxy(t, b.Addr())
	px.Cut()
	e := &env{t: t, addr: b.Addr(), rt: &goRuntime{}, dir: t.TempDir(), logs: &testutil.Buffer{}}
	c, err := protocol.New(context.Background(), protocol.Config{
		Servers:          []string{px.Addr()},
		ClientID:         fmt.Sprintf("host-test-%d", clientSeq.Add(1)),
		Timeout:          5 * time.Second,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
		ReconnectBackoff: func(int) time.Duration { return 10 * time.Millisecond },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.client, e.user = c, newClient(t, b.Addr())
	e.startHost(opts...)
	px.Heal()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	return e
}

// A rule's write whose request is larger than the broker's maximum packet
// size (4 MiB, announced in its CONNACK) fails for that rule with TOO_LARGE,
// and counts as its failure, without being sent: the host's connection is
// not dropped (no reconnection), and another rule's calls keep working.
// The rule's max_value, 8 MiB, was taken while the broker's limit was not
// known; the host says so once it connects.
func TestWriteOverBrokerPacketLimitIsTooLargeForItsRule(t *testing.T) {
	e := newEnvBeforeConnect(t, func(o *Config) {
		o.Rules = map[string]RuleConfig{"big.gorule": {MaxValueBytes: 8 << 20, Timeout: time.Minute}}
	})
	value := make([]byte, 4<<20+512<<10) // 4.5 MiB
	var mu sync.Mutex
	var statuses []abi.Status
	e.load("big", goRule{init: watchInit("big/in"), handle: func(ctx context.Context, h abi.Host, _ abi.Event) error {
		_, err := h.Set(ctx, "big/out", value, abi.SetOptions{})
		mu.Lock()
		statuses = append(statuses, abi.StatusOf(err))
		mu.Unlock()
		return err
	}})
	e.load("small", goRule{init: watchInit("small/in"), handle: func(ctx context.Context, h abi.Host, ev abi.Event) error {
		_, err := h.Set(ctx, "small/out", ev.Value, abi.SetOptions{})
		return err
	}})
	const events = 10
	for i := 1; i <= events; i++ {
		e.set("big/in", fmt.Sprint(i))
		waitFor(t, fmt.Sprintf("big's event %d ended", i), func() bool { s := e.status("big"); return s.Failed+s.Handled == uint64(i) })
		e.set("small/in", fmt.Sprint(i))
		e.waitValue("small/out", fmt.Sprint(i))
	}
	mu.Lock()
	defer mu.Unlock()
	for i, s := range statuses {
		if s != abi.StatusTooLarge {
			t.Errorf("write %d: status %v, want TOO_LARGE", i+1, s)
		}
	}
	st := e.status("big")
	if st.Failed != events || !strings.Contains(st.LastError, fmt.Sprintf("maximum packet size of %d bytes", broker.MaxPacketSize)) {
		t.Errorf("big: failed %d, last error %q; want %d failures naming the broker's limit", st.Failed, st.LastError, events)
	}
	if n := e.client.Stats().Reconnects; n != 0 {
		t.Errorf("the host's connection was dropped: %d reconnections", n)
	}
	if _, ok := e.get("big/out"); ok {
		t.Error("big/out was written")
	}
	// small's last write is seen before its handler has returned and been
	// counted: wait for the count.
	waitFor(t, "small's events all counted", func() bool { s := e.status("small"); return s.Failed+s.Handled == events })
	if s := e.status("small"); s.Failed != 0 || s.Handled != events {
		t.Errorf("small: handled %d, failed %d; want %d and 0", s.Handled, s.Failed, events)
	}
	waitFor(t, "the log naming the rule whose max_value the broker cannot carry", func() bool {
		l := e.logs.String()
		return strings.Contains(l, "rule=big.gorule") && strings.Contains(l, "max_value=8388608") &&
			strings.Contains(l, fmt.Sprintf("broker_max_packet=%d", broker.MaxPacketSize))
	})
}

// Once the broker's maximum packet size is known (the client is connected),
// a max_value it cannot carry is refused, naming the entry and both limits:
// by New, and by SetRuleConfig, which keeps the previous settings.
func TestMaxValueTheBrokerCannotCarryRefused(t *testing.T) {
	e := newEnv(t)
	fits := broker.MaxPacketSize - ValueHeadroom
	over := map[string]RuleConfig{"big.gorule": {MaxValueBytes: 8 << 20}, "ok.gorule": {MaxValueBytes: fits}}
	want := fmt.Sprintf(`rule "big.gorule": max_value of 8388608 bytes is more than the broker can carry: its maximum packet size is %d bytes, which leaves at most %d bytes`,
		broker.MaxPacketSize, fits)
	_, err := New(Config{Store: e.client, Runtimes: []abi.Runtime{e.rt}, Rules: over})
	if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "ok.gorule") {
		t.Fatalf("New: %v; want %q, and nothing about ok.gorule", err, want)
	}
	_, err = New(Config{Store: e.client, Runtimes: []abi.Runtime{e.rt}, Defaults: RuleConfig{MaxValueBytes: fits + 1}})
	if err == nil || !strings.Contains(err.Error(), "defaults: max_value of") {
		t.Fatalf("New with defaults over the limit: %v", err)
	}

	e.load("w", goRule{})
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, map[string]RuleConfig{"w.gorule": {MaxValueBytes: 4}}); err != nil {
		t.Fatal(err)
	}
	over["w.gorule"] = RuleConfig{Read: []string{}}
	if err := e.host.SetRuleConfig(e.ctx(), RuleConfig{}, over); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("SetRuleConfig: %v; want %q", err, want)
	}
	if cfg := e.host.ruleAt(filepath.Join(e.dir, "w.gorule")).config(); cfg.MaxValueBytes != 4 || cfg.Read != nil {
		t.Errorf("settings after a refused SetRuleConfig: max_value %d, read %v; want the previous ones", cfg.MaxValueBytes, cfg.Read)
	}
}
