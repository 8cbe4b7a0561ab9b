package bench

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
)

// consolePair is three hosts on one broker running the same Lua rule: off,
// the env's own host without a console; quiet, a host whose Tracer is an
// admin.Console nobody watches; and on, a host whose Tracer is an
// admin.Console served by an admin endpoint with streams live consoles
// reading its stream, as `ssrun dev` with browsers open on the live page.
type consolePair struct {
	e       *env
	console *admin.Console
	flows   []flow // off, quiet, on
}

func newConsolePair(tb testing.TB, streams int) *consolePair {
	tb.Helper()
	e := newEnv(tb, host.RuleConfig{Mailbox: 1 << 16})
	_, _, quiet := sideHost(tb, e, "quiet", host.Config{Tracer: admin.NewConsole(admin.ConsoleConfig{})})
	c := admin.NewConsole(admin.ConsoleConfig{})
	h, client, on := sideHost(tb, e, "on", host.Config{Tracer: c})
	srv, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Logger: e.log})
	if err != nil {
		tb.Fatal(err)
	}
	c.Register(srv, func() admin.ConsoleSource { return h }, func() admin.KeySource { return client })
	if err := srv.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	var readers sync.WaitGroup
	testutil.CloseAtEnd(tb, "admin server", func(ctx context.Context) error {
		err := srv.Close(ctx) // ends the streams
		readers.Wait()
		return err
	})
	for range streams {
		res, err := http.Get("http://" + srv.Addr() + "/console/api/stream")
		if err != nil {
			tb.Fatal(err)
		}
		readers.Add(1)
		go func() {
			defer readers.Done()
			defer res.Body.Close()
			_, _ = io.Copy(io.Discard, res.Body)
		}()
	}
	testutil.WaitFor(tb, "the streams open", func() bool { n, _ := c.Streams(); return n == streams })
	offPath := e.load("off.lua", copyRule("off"), false)
	return &consolePair{e: e, console: c, flows: []flow{
		{"console-off", "off/in", "off/out", handledOf(e.host, offPath)},
		{"console-" + quiet.name, quiet.in, quiet.out, quiet.handled},
		{"console-" + on.name, on.in, on.out, on.handled},
	}}
}

// The fixture of BenchmarkRuleThroughputConsole works: both hosts copy,
// the console saw the on rule's runs, and the streams stay open.
func TestConsolePair(t *testing.T) {
	p := newConsolePair(t, 3)
	for _, f := range p.flows {
		p.e.drive(f, 20, 8)
	}
	for _, f := range p.flows {
		p.e.checkCopied(f)
	}
	p.e.checkClean()
	if runs := p.console.Runs("on.lua")[admin.OutcomeHandled]; len(runs) == 0 || runs[0].Writes[0].Key != "on/out" {
		t.Errorf("the console's handled runs of on.lua: %+v", runs)
	}
	if n, _ := p.console.Streams(); n != 3 {
		t.Errorf("%d streams open, want 3", n)
	}
}

// BenchmarkRuleThroughputConsole is BenchmarkRuleThroughput's Lua flow on
// two hosts of one broker, without a console (the baseline) and with one
// that 10 live streams read (the console's default bounds: each stream
// samples beyond 200 entries a second), and with one nobody watches. They
// run in turn in chunks of 500 events, the order rotating each round; one
// op is one event of each. Reports console-off-ev/s, console-quiet-ev/s,
// console-on-ev/s and their ratios to off (target for on: >= 0.97).
func BenchmarkRuleThroughputConsole(b *testing.B) {
	p := newConsolePair(b, 10)
	p.e.compare(b, p.flows)
	if n, _ := p.console.Streams(); n != 10 {
		b.Errorf("%d streams open at the end, want 10", n)
	}
}
