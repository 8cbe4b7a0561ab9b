package bench

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// The many-rules fixture: rule i of a key space of n keys watches the ten
// keys many/k/<(2i+j) mod n> (j = 0..9) and handles a SET of any of them by
// setting many/out/<i> to the value. With n = 2 x the number of rules every
// key is watched by five rules, and neighbouring rules share keys, as rules
// of one deployment do. Three in ten rules are Go WebAssembly guests
// (testdata/manyrule, one module shared by all of them: it reads i and n
// from its file name), the others Lua (one source per rule, its keys
// written in).
const manyWatches = 10

func manyKey(k int) string { return "many/k/" + strconv.Itoa(k) }

func manyOut(i int) string { return "many/out/" + strconv.Itoa(i) }

// ruleKeys returns the numbers of the keys rule i watches in a key space of
// n keys (as testdata/manyrule computes them).
func ruleKeys(i, n int) []int {
	ks := make([]int, manyWatches)
	for j := range ks {
		ks[j] = (2*i + j) % n
	}
	return ks
}

// manyIsWASM reports whether rule i is a WebAssembly rule (3 in 10).
func manyIsWASM(i int) bool { return i%10 >= 7 }

// manyLua returns the Lua rule i of a key space of n keys.
func manyLua(i, n int) []byte {
	var keys []string
	for _, k := range ruleKeys(i, n) {
		keys = append(keys, strconv.Quote(manyKey(k)))
	}
	return fmt.Appendf(nil, `local ss = require("ssrun")
local OUT = %q
for _, k in ipairs({%s}) do
  local ok, msg = ss.watch(k)
  if ok == nil then error(msg) end
end
function on_event(ev)
  if ev.op ~= "SET" then return end
  local ok, msg, code = ss.set(OUT, ev.value)
  if ok == nil then error(tostring(code) .. ": " .. tostring(msg)) end
end
`, manyOut(i), strings.Join(keys, ", "))
}

// manyGuest returns testdata/manyrule built, once per test binary.
func manyGuest(tb testing.TB) []byte {
	tb.Helper()
	path, err := testDir.WASM("manyrule.wasm", "./testdata/manyrule")
	if err != nil {
		tb.Fatal(err)
	}
	return readFile(tb, path)
}

// handledCounter is a host.Observer that counts handler calls and keeps
// the longest.
type handledCounter struct {
	handled, failed atomic.Uint64
	longest         atomic.Int64 // time.Duration
}

func (c *handledCounter) ObserveHandle(_ string, took time.Duration, failed bool) {
	c.handled.Add(1)
	if failed {
		c.failed.Add(1)
	}
	for l := c.longest.Load(); int64(took) > l && !c.longest.CompareAndSwap(l, int64(took)); l = c.longest.Load() {
	}
}

// manyHost is an env running rules 0..rules-1 of the fixture over a key
// space of n keys.
type manyHost struct {
	*env
	name     string
	rules, n int
	count    *handledCounter
	watchers map[int]int // key number -> rules watching it
	keys     []int       // the watched key numbers, in order
	out      *outWatch   // watches every rule's output key
	pending  int         // the most requests seen pending on the host's client while driving

	load         time.Duration // LoadDir of all the rules
	loadRequests uint64        // the store requests the host made meanwhile
	mem          memoryUse     // what loading them added to the process, in total
}

// The many-rules hosts run with the default handler call deadline (1 s).
// A burst of changes to keys watched by many rules wakes up to one handler
// per rule; the host runs at most host.DefaultMaxConcurrentCalls of them at
// once and the others wait in their mailboxes, so a call's deadline counts
// its own requests, not the queue of every woken rule's (before that bound,
// calls took up to 1.6 s and some failed; longest-ms shows it now).

// startMany starts an env, writes rules 0..rules-1 of a key space of n keys
// into its rules folder and loads them with one LoadDir, timing it and
// measuring the memory it added (the live Go heap after a GC, and the
// process's resident set). The WebAssembly guest is read first, so its
// build is not counted; its compilation (a hit in the shared compilation
// cache after the first run of the test binary) is.
func startMany(tb testing.TB, name string, rules, n int, mods ...func(*host.Config)) *manyHost {
	tb.Helper()
	count := &handledCounter{}
	mods = append([]func(*host.Config){func(c *host.Config) { c.Observer = count }}, mods...)
	m := &manyHost{
		env:  newEnv(tb, host.RuleConfig{Mailbox: 1 << 16}, mods...),
		name: name, rules: rules, n: n, count: count, watchers: map[int]int{},
	}
	var guest []byte
	var outs []string
	for i := range rules {
		if manyIsWASM(i) {
			if guest == nil {
				guest = manyGuest(tb)
			}
			m.write(fmt.Sprintf("many-%04d-of-%d.wasm", i, n), guest, false)
		} else {
			m.write(fmt.Sprintf("many-%04d.lua", i), manyLua(i, n), false)
		}
		seen := map[int]bool{} // a key space of fewer than 10 keys repeats keys
		for _, k := range ruleKeys(i, n) {
			if seen[k] {
				continue
			}
			seen[k] = true
			if m.watchers[k] == 0 {
				m.keys = append(m.keys, k)
			}
			m.watchers[k]++
		}
		outs = append(outs, manyOut(i))
	}
	var before, after runtime.MemStats
	debug.FreeOSMemory()
	runtime.ReadMemStats(&before)
	rss := vmRSS(tb, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	req0 := m.hostC.Stats().Requests
	t0 := time.Now()
	if err := m.host.LoadDir(ctx, m.dir); err != nil {
		tb.Fatalf("%s: load: %v", name, err)
	}
	m.load = time.Since(t0)
	m.loadRequests = m.hostC.Stats().Requests - req0
	debug.FreeOSMemory()
	runtime.ReadMemStats(&after)
	m.mem = memoryUse{heap: float64(after.HeapAlloc) - float64(before.HeapAlloc), rss: float64(vmRSS(tb, 0) - rss)}
	if got := len(m.host.Status()); got != rules {
		tb.Fatalf("%s: %d rules loaded, want %d", name, got, rules)
	}
	m.out = startOutWatch(tb, m.addr, m.log, outs)
	return m
}

// key returns the i-th key to change: the watched keys in a fixed
// scattered order.
func (m *manyHost) key(i int) int { return m.keys[(i*7919)%len(m.keys)] }

// drive changes n watched keys from the user client with up to inflight
// requests in flight (key m.key(from+i), value "t<from+i>") and returns the
// time until the rules have handled every change (each change is handled
// by every rule watching its key).
func (m *manyHost) drive(from, n, inflight int) time.Duration {
	m.tb.Helper()
	want := m.count.handled.Load()
	for i := range n {
		want += uint64(m.watchers[m.key(from+i)])
	}
	t0 := time.Now()
	testutil.InFlight(m.tb, inflight, n, func(_, i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		k := manyKey(m.key(from + i))
		if _, err := m.user.Set(ctx, []byte(k), []byte("t"+strconv.Itoa(from+i)), protocol.SetOptions{}); err != nil {
			return fmt.Errorf("set %s: %w", k, err)
		}
		return nil
	})
	deadline := t0.Add(time.Minute)
	for m.count.handled.Load() < want {
		if time.Now().After(deadline) {
			m.tb.Fatalf("%s: %d handlings of %d in a minute", m.name, m.count.handled.Load(), want)
		}
		m.pending = max(m.pending, m.hostC.Stats().Pending)
		time.Sleep(250 * time.Microsecond)
	}
	return time.Since(t0)
}

// probe changes key m.key(i) to "p<i>", alone, and returns the time until
// each rule watching it has written the value to its output key, as seen
// by another client.
func (m *manyHost) probe(i int) []time.Duration {
	m.tb.Helper()
	k, v := m.key(i), "p"+strconv.Itoa(i)
	return m.out.measure(m.tb, v, m.watchers[k], func() { m.set(manyKey(k), v) })
}

// check fails the test unless every change was handled without failure or
// drop, and unless the store holds one KEYNOTIFY registration per watched
// key of the host (shared by the rules watching it) plus one per output key
// (the output watcher's).
func (m *manyHost) check() {
	m.tb.Helper()
	m.checkClean()
	if f := m.count.failed.Load(); f != 0 {
		m.tb.Errorf("%s: %d handler calls failed", m.name, f)
	}
	if got, want := m.host.Stats().WatchedKeys, len(m.keys); got != want {
		m.tb.Errorf("%s: host watches %d keys, want %d", m.name, got, want)
	}
	if got, want := m.broker.Stats().Registrations, len(m.keys)+m.rules; got != want {
		m.tb.Errorf("%s: the store holds %d KEYNOTIFY registrations, want %d (one per watched key, %d, and per output key, %d; %d rule watches)",
			m.name, got, want, len(m.keys), m.rules, m.rules*manyWatches)
	}
}

// TestManyRules loads 100 rules, 70 Lua and 30 Go WebAssembly ones sharing
// one module, watching 10 keys each over 200 keys, into one host. Every key
// is changed once: each of the five rules watching it must write the new
// value to its output key, every rule must have handled its ten events,
// and the store must hold one KEYNOTIFY registration per key (200), not
// one per rule watch (1,000). The store counts one registration per client
// and key however many KEYNOTIFY requests the client sends, so the host's
// requests during the load are counted too: one KEYNOTIFY and one GET (the
// version a reconnect compares with) per key, and a few per rule (its
// timers), far fewer than one KEYNOTIFY per rule watch would add (800).
func TestManyRules(t *testing.T) {
	const rules = 100
	m := startMany(t, "many", rules, 2*rules)
	if len(m.keys) != 2*rules {
		t.Fatalf("the rules watch %d keys, want %d", len(m.keys), 2*rules)
	}
	if limit := uint64(2*len(m.keys) + 2*rules); m.loadRequests > limit {
		t.Errorf("loading %d rules on %d keys made %d store requests, want at most %d (2 per key, 2 per rule)",
			rules, len(m.keys), m.loadRequests, limit)
	}
	for i := range m.keys {
		if took := m.probe(i); len(took) != 5 {
			t.Fatalf("change of %s reached %d rules, want 5", manyKey(m.key(i)), len(took))
		}
	}
	// A write is visible before its handler call returns and is counted.
	testutil.WaitFor(t, "every handler call to return", func() bool { return m.count.handled.Load() == rules*manyWatches })
	for _, s := range m.host.Status() {
		if s.Handled != manyWatches {
			t.Errorf("rule %s handled %d events, want %d", filepath.Base(s.Path), s.Handled, manyWatches)
		}
	}
	m.check()
}

// BenchmarkManyRules is a host with 1,000 rules (700 Lua, 300 Go
// WebAssembly sharing one module) watching 10 keys each over 2,000 keys
// (five rules per key), against the BASELINE, the same host with 1 rule
// (Lua, watching 10 keys), and a control with the same fan-out as the 1,000
// rules but 5 rules (Lua, all watching the same 2 keys): what differs
// between 1rule and 5rules is the fan-out, between 5rules and 1000rules the
// number of rules. All in this process, each host on its own embedded
// broker. It reports:
//
//   - load: the time of one LoadDir of all the rule files (ms), and the
//     live heap and resident set it added (MB, in total and per rule);
//   - throughput: a user client changes watched keys with 64 requests in
//     flight; rate = handler calls per second until every change is
//     handled by every rule watching it (hev/s), and key changes per
//     second (chg/s). The subjects take turns in chunks of 500 changes;
//     one op is one key change of each subject;
//   - the longest handler call (ms), all phases, and the most requests
//     seen pending at once on the host's store client while driving
//     (sampled every 250 µs or so);
//   - change-to-write latency: one change at a time (every tenth op), the
//     time from the user's SET until another client sees the value in the
//     output key of each rule watching the key (p50, p99 in µs, over all
//     writes; first-p50, first-p99 over the first write of each change,
//     the figure comparable to a single rule's), the subjects alternating
//     probe by probe.
//
// Ratios: <subject>-<metric>-x-1rule, and 1000rules-<metric>-x-5rules.
func BenchmarkManyRules(b *testing.B) {
	const chunk, inflight, rules = 500, 64, 1000
	manyGuest(b)
	subjects := []*manyHost{
		startMany(b, "1rule", 1, 2*rules),
		startMany(b, "5rules", 5, 2),
		startMany(b, "1000rules", rules, 2*rules),
	}
	for _, s := range subjects { // warm up: connections, caches, every rule's first event
		s.drive(0, max(200, len(s.keys)), inflight)
	}
	elapsed := make([]time.Duration, len(subjects))
	changes := make([]int, len(subjects))
	handled := make([]uint64, len(subjects))
	lat := make([][]time.Duration, len(subjects))   // every write
	first := make([][]time.Duration, len(subjects)) // the first write of each change
	for k, s := range subjects {
		handled[k] = s.count.handled.Load()
	}
	probes := 0
	b.ResetTimer()
	for round, done := 0, 0; done < b.N; round, done = round+1, done+chunk {
		n := min(chunk, b.N-done)
		for j := range subjects {
			k := (round + j) % len(subjects)
			elapsed[k] += subjects[k].drive(done, n, inflight)
			changes[k] += n
		}
		for range n / 10 {
			for k, s := range subjects {
				took := s.probe(probes) // in the order seen
				lat[k] = append(lat[k], took...)
				first[k] = append(first[k], took[0])
			}
			probes++
		}
	}
	b.StopTimer()
	for _, s := range subjects {
		s.check()
	}
	hev := make([]float64, len(subjects))
	for k, s := range subjects {
		handled[k] = s.count.handled.Load() - handled[k] - uint64(probesWrites(s, probes))
		hev[k] = float64(handled[k]) / elapsed[k].Seconds()
		b.ReportMetric(ms(s.load), s.name+"-load-ms")
		b.ReportMetric(s.mem.heap/1e6, s.name+"-heap-MB")
		b.ReportMetric(s.mem.rss/1e6, s.name+"-rss-MB")
		b.ReportMetric(s.mem.heap/float64(s.rules)/1e3, s.name+"-heap-KB/rule")
		b.ReportMetric(hev[k], s.name+"-hev/s")
		b.ReportMetric(float64(changes[k])/elapsed[k].Seconds(), s.name+"-chg/s")
		b.ReportMetric(ms(time.Duration(s.count.longest.Load())), s.name+"-longest-ms")
		b.ReportMetric(float64(s.pending), s.name+"-pending-max")
	}
	// Each metric per subject (1rule, 5rules, 1000rules), for the ratios.
	type metric struct {
		name string
		v    []float64
	}
	metrics := []metric{{"hev", hev}}
	if probes > 0 {
		for _, l := range []struct {
			name string
			ds   [][]time.Duration
		}{{"", lat}, {"first-", first}} {
			for _, q := range []float64{0.5, 0.99} {
				m := metric{fmt.Sprintf("%sp%.0f", l.name, q*100), make([]float64, len(subjects))}
				for k, s := range subjects {
					m.v[k] = us(quantile(l.ds[k], q))
					b.ReportMetric(m.v[k], s.name+"-"+m.name+"-us")
				}
				metrics = append(metrics, m)
			}
		}
	}
	for _, m := range metrics {
		b.ReportMetric(m.v[1]/m.v[0], "5rules-"+m.name+"-x-1rule")
		b.ReportMetric(m.v[2]/m.v[0], "1000rules-"+m.name+"-x-1rule")
		b.ReportMetric(m.v[2]/m.v[1], "1000rules-"+m.name+"-x-5rules")
	}
}

// probesWrites is the number of handler calls the first n probes of s
// caused.
func probesWrites(s *manyHost, n int) int {
	w := 0
	for i := range n {
		w += s.watchers[s.key(i)]
	}
	return w
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkManyRulesLoad is the load of BenchmarkManyRules alone: one
// LoadDir of the 1,000 rules (700 Lua, 300 Go WebAssembly) into a fresh
// host, load-ms, and the store requests it made. The BASELINE is the same
// load one file after the other (host.Config.LoadConcurrency 1); the
// subject, default (host.DefaultLoadConcurrency loads at once), alternates
// with it op by op. It reports each one's load-ms and default-x-serial,
// the default's load time over the serial one's. The WebAssembly guest is
// compiled into the shared compilation cache first (a load of 10 rules).
func BenchmarkManyRulesLoad(b *testing.B) {
	const rules = 1000
	manyGuest(b)
	// Compile the guest into the shared compilation cache first, so that
	// neither subject pays the cold compile.
	startMany(b, "warm-up", 10, 20).closeNow()
	subjects := []struct {
		name string
		conc int
	}{{"serial", 1}, {"default", host.DefaultLoadConcurrency()}}
	load := make([]time.Duration, len(subjects))
	reqs := make([]uint64, len(subjects))
	for i := 0; i < b.N; i++ {
		for k := range subjects {
			s := subjects[(i+k)%len(subjects)]
			m := startMany(b, s.name, rules, 2*rules, func(c *host.Config) { c.LoadConcurrency = s.conc })
			load[(i+k)%len(subjects)] += m.load
			reqs[(i+k)%len(subjects)] += m.loadRequests
			m.closeNow()
		}
	}
	for k, s := range subjects {
		b.ReportMetric(ms(load[k])/float64(b.N), s.name+"-load-ms")
		b.ReportMetric(float64(reqs[k])/float64(b.N), s.name+"-load-requests")
		if k > 0 {
			b.ReportMetric(float64(load[k])/float64(load[0]), s.name+"-x-serial")
		}
	}
}

// closeNow closes m's host (its rules and their memory) before the end of
// the benchmark; the cleanup's Close then does nothing.
func (m *manyHost) closeNow() {
	m.tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.WaitBound)
	defer cancel()
	if err := m.host.Close(ctx); err != nil {
		m.tb.Fatalf("%s: close: %v", m.name, err)
	}
}
