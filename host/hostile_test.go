package host

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/membership"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
)

// Values under the reserved prefix are hostile input: any client of the
// store may write them (rules may not). These tests plant values no host
// wrote and run the real host over them.

// plantTimers writes rule's timer index, listing names (as given: a name
// may be listed twice), and the records in recs, as an outside client.
func (e *env) plantTimers(rule string, names []string, recs map[string][]byte) {
	e.t.Helper()
	shards := map[int][]string{}
	var dir timers.TimerDir
	for _, n := range names {
		s := timers.TimerShard(n)
		shards[s] = append(shards[s], n)
		dir.Put(s, true)
	}
	vals := map[string][]byte{timers.TimerDirKey(rule): dir.Encode()}
	for s, ns := range shards {
		vals[timers.TimerShardKey(rule, s)] = timers.EncodeTimerShard(ns)
	}
	for n, v := range recs {
		vals[timers.TimerKey(rule, n)] = v
	}
	for k, v := range vals {
		if _, err := e.user.Set(e.ctx(), []byte(k), v, protocol.SetOptions{}); err != nil {
			e.t.Fatalf("set %s: %v", k, err)
		}
	}
}

// Timer records no host wrote are skipped, each with a warning naming its
// key, and kept as they are; the rule's other timers fire as armed. A
// record that decodes but with numbers no rule can arm (a period past
// what a time.Duration holds, a deadline hundreds of thousands of years
// ahead) is one of them: before, a period of math.MaxInt64 ms fired the
// timer at load, then overflowed its next deadline to -1, so it fired a
// second time at once and its record was rewritten with a deadline the
// next load refuses.
func TestHostileTimerRecordsSkipped(t *testing.T) {
	e, clk := newTimerEnv(t)
	const rule = "hostile.gorule"
	good := timers.EncodeTimerRecord(t0+1000, 0, []byte("p"))
	bad := map[string][]byte{
		"overflow":         timers.EncodeTimerRecord(t0-1000, math.MaxInt64, nil),
		"far":              timers.EncodeTimerRecord(math.MaxInt64, 0, nil),
		"far-every":        timers.EncodeTimerRecord(t0-1000, math.MaxInt64/2, nil),
		"null":             []byte("null"),
		"array":            []byte("[]"),
		"object":           []byte("{}"),
		"truncated":        good[:10],
		"garbage":          {0xff, 0x00, 0xfe, 0x01, 0x80},
		"huge":             bytes.Repeat([]byte{0xee}, 1<<20),
		"negative":         timers.EncodeTimerRecord(-5, 1000, nil),
		"odd\x00/../*#+\n": []byte("null"),
	}
	recs := map[string][]byte{"ok": good}
	names := []string{"ok"}
	for n, v := range bad {
		recs[n] = v
		names = append(names, n)
	}
	e.plantTimers(rule, names, recs)
	tr := e.loadTimerRule("hostile")
	clk.set(t0 + 1000)
	got := tr.sync(t)
	if len(got) != 1 || got[0].ev.Key != "ok" || string(got[0].ev.Value) != "p" {
		var keys []string
		for _, f := range got {
			keys = append(keys, f.ev.Key)
		}
		t.Errorf("fired %q, want [ok] once", keys)
	}
	for n, v := range bad {
		key := timers.TimerKey(rule, n)
		res, err := e.user.Get(e.ctx(), []byte(key), protocol.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(res.Value, v) {
			t.Errorf("%q = %.40q, want it kept as %.40q", key, res.Value, v)
		}
		if !strings.Contains(e.logs.String(), "timer record unreadable") || !strings.Contains(e.logs.String(), quoteKey(key)) {
			t.Errorf("no warning naming %q", key)
		}
	}
}

// quoteKey is key as the text log handler writes it as a value.
func quoteKey(key string) string {
	var b strings.Builder
	slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key != "k" {
			return slog.Attr{}
		}
		return a
	}})).Info("", "k", key)
	return strings.TrimSuffix(strings.TrimPrefix(b.String(), "k="), "\n")
}

// A name its shard lists more than once (no host writes that) is one
// timer: before, each listing counted as an armed timer, so a shard
// listing a name 5 times made a rule with max_timers 3 unable to arm a
// second timer until it was reloaded.
func TestTimerShardDuplicateNamesCountOnce(t *testing.T) {
	const rule = "dups.gorule"
	e, _ := newTimerEnv(t, func(o *Config) { o.Rules = map[string]RuleConfig{rule: {MaxTimers: 3}} })
	e.plantTimers(rule, []string{"d", "d", "d", "d", "d"}, map[string][]byte{"d": timers.EncodeTimerRecord(t0+time.Hour.Milliseconds(), 0, nil)})
	tr := e.loadTimerRule("dups")
	tr.arm(t, "a", time.Hour, abi.TimerOptions{})
	tr.arm(t, "b", time.Hour, abi.TimerOptions{})
	err := tr.h.Timer(e.ctx(), "c", time.Hour, abi.TimerOptions{})
	if abi.StatusOf(err) != abi.StatusQuota {
		t.Errorf("a fourth timer (d, a, b armed, max_timers 3): %v, want QUOTA", err)
	}
	var infos []string
	tis, _ := e.host.Timers(filepath.Join(e.dir, rule))
	for _, ti := range tis {
		infos = append(infos, ti.Name)
	}
	if strings.Join(infos, ",") != "a,b,d" {
		t.Errorf("timers %q, want a, b, d", infos)
	}
}

// A group's keys planted by an outside client: a roster with lines that
// name no member, a live member no host runs whose rule set is JSON null
// (stored under its true digest) and whose published patterns are a
// megabyte of garbage, and then this host's doorbell rung with garbage.
// The host joins, warns about each naming its key, and runs the group's
// rule. Before, the null set decoded to no set, silently: its member was
// given no rule with no word why.
func TestGroupHostileMembershipKeys(t *testing.T) {
	c := newCluster(t, 1, groupTestTTL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	digest := membership.SetDigest([]byte("null"))
	g := ReservedPrefix + "group/g/"
	garbage := bytes.Repeat([]byte{0xff, 0x00, '\n', '*'}, 1<<18)
	for k, v := range map[string][]byte{
		g + "roster":          []byte("ghost " + digest + "\nlonely\n\x00\xff garbage here\n{} [] null\nghost " + digest),
		g + "member/ghost":    []byte("{}"),
		g + "rules/" + digest: []byte("null"),
		g + "patterns/ghost":  garbage,
	} {
		if _, err := c.user.Set(ctx, []byte(k), v, protocol.SetOptions{}); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
	}
	m := c.start()
	waitFor(t, "r00 runs", func() bool { return len(c.owners()["r00"]) == 1 })
	if _, err := c.user.Set(ctx, []byte("in/r00"), []byte("1"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !c.waitHandled("r00", "1", time.Minute) {
		t.Fatal("in/r00 was not handled")
	}
	bell := g + "found/" + m.client.ClientID()
	for _, v := range [][]byte{[]byte("null"), {0xff, 0xfe}, []byte(ReservedPrefix + "timers/x"), garbage} {
		if _, err := c.user.Set(ctx, []byte(bell), v, protocol.SetOptions{}); err != nil {
			t.Fatalf("set %s: %v", bell, err)
		}
	}
	if _, err := c.user.Set(ctx, []byte("in/r00"), []byte("2"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !c.waitHandled("r00", "2", time.Minute) {
		t.Fatal("in/r00 was not handled after the doorbell rang with garbage")
	}
	logs := c.logs.String()
	for _, want := range []string{
		"rule set is unreadable", quoteKey(g + "rules/" + digest),
		"roster line ignored", "the member is listed twice",
		"published patterns are longer than a member publishes",
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("the log does not say %q", want)
		}
	}
}

// A roster of thousands of lines that name no member, written by an
// outside client with this host's line kept, is warned about once, naming
// the key and the count, however many steps read it. Before, each line
// was warned about, and past 1024 the notes of what was warned started
// over: every step logged the thousands again.
func TestGroupRosterOfBadLinesWarnedOnce(t *testing.T) {
	c := newCluster(t, 1, groupTestTTL)
	m := c.start()
	waitFor(t, "r00 runs", func() bool { return len(c.owners()["r00"]) == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := ReservedPrefix + "group/g/roster"
	roster, err := c.user.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		t.Fatal(err)
	}
	v := slices.Clone(roster.Value)
	const n = 3000
	for i := range n {
		v = fmt.Appendf(v, "\nbad line %d", i)
	}
	poison := hlc.HLC{Wall: time.Now().Add(5 * time.Second).UnixMilli(), Node: "poison"}
	if _, err := c.user.Set(ctx, []byte(key), v, protocol.SetOptions{FencingToken: poison}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the bad lines warned about", func() bool { return strings.Contains(c.logs.String(), "bad line") })
	steps(t, []*member{m}, 3)
	if got := strings.Count(c.logs.String(), "bad line"); got > 2*maxBadLinesShown {
		t.Errorf("%d bad lines in the log after 3 steps, want at most %d", got, 2*maxBadLinesShown)
	}
	if !strings.Contains(c.logs.String(), fmt.Sprintf("key=%s lines=%d", key, n)) {
		t.Errorf("no warning naming %s and its %d bad lines", key, n)
	}
	if _, err := c.user.Set(ctx, []byte("in/r00"), []byte("1"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !c.waitHandled("r00", "1", time.Minute) {
		t.Fatal("in/r00 was not handled")
	}
}

// maxBadLinesShown is how many bad roster lines the host's warning
// shows (group.maxBadLines).
const maxBadLinesShown = 8

// An ownership lease planted by an outside client, with no expiry, keeps
// the rule from running anywhere: the host says so once it has waited
// for it past twice the TTL (a host's lease lapses within one), naming the
// key and its holder, and takes the rule over as soon as the key is
// deleted. Before, it waited without a word.
func TestGroupPlantedOwnershipLeaseWarned(t *testing.T) {
	c := newCluster(t, 1, groupTestTTL)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key := ReservedPrefix + "group/g/rule/" + membership.RuleHash("r00.gorule")
	if _, err := c.user.Set(ctx, []byte(key), []byte("intruder\x00\xff"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	c.start()
	waitFor(t, "a warning naming the lease", func() bool {
		logs := c.logs.String()
		return strings.Contains(logs, "ownership lease held by another holder") && strings.Contains(logs, quoteKey(key)) &&
			strings.Contains(logs, `holder="intruder\x00\xff"`)
	})
	if _, err := c.user.Del(ctx, []byte(key), protocol.DelOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "r00 runs", func() bool { return len(c.owners()["r00"]) == 1 })
	if _, err := c.user.Set(ctx, []byte("in/r00"), []byte("1"), protocol.SetOptions{}); err != nil {
		t.Fatal(err)
	}
	if !c.waitHandled("r00", "1", time.Minute) {
		t.Fatal("in/r00 was not handled")
	}
}
