package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
)

// A trace recorded next to a live `ssrun dev` reproduces the live run's
// writes exactly: what a watcher of the keys the thermostat writes saw is
// what `ssrun replay` prints for those keys, in the same order; the rule's
// write-back of a clamped set point, recorded too, is not applied twice.
func TestRecordReplayReproducesLiveWrites(t *testing.T) {
	dir := thermostatCopy(t)
	out, errw, stopDev := start(t, "dev", dir, "--listen", "127.0.0.1:0")
	addr := waitOutput(t, out, regexp.MustCompile(`ssrun dev: state store on (\S+),`))[1]

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watcher := keyWatcher(ctx, t, addr, "replay-watcher", "hvac1/target", "thermostat1/error")
	trace := filepath.Join(t.TempDir(), "live.trace")
	_, recErr, stopRec := start(t, "record", "--broker", addr, "--keys", "thermostat1/setPoint", trace)
	waitOutput(t, recErr, regexp.MustCompile(`recording 1 key\(s\)`))

	// Each outside change, then the number of changes the rule makes to the
	// watched keys: wait for them, so the next change comes after.
	var live []string
	for _, s := range []struct {
		args  []string
		wants int
	}{
		{[]string{"set", "thermostat1/setPoint", "30"}, 1},   // target 28 (and the write-back)
		{[]string{"set", "thermostat1/setPoint", "warm"}, 1}, // error
		{[]string{"set", "thermostat1/setPoint", "18"}, 2},   // target 18, error deleted
		{[]string{"del", "thermostat1/setPoint"}, 1},         // target deleted
		{[]string{"set", "thermostat1/setPoint", "12"}, 1},   // target 16 (and the write-back)
	} {
		if r := runCLI(t, "", append([]string{"kv", "--broker", addr}, s.args...)...); r.code != 0 {
			t.Fatalf("kv %v: %+v", s.args, r)
		}
		for n := 0; n < s.wants; {
			select {
			case ev := <-watcher.Events():
				if ev.Kind == protocol.EventConnected {
					continue // the first connection
				}
				if ev.Kind != protocol.EventNotify {
					t.Fatalf("watcher: %v %v", ev.Kind, ev.Err)
				}
				n++
				w := "DEL " + string(ev.Key)
				if ev.Op == protocol.OpSet {
					w = "SET " + string(ev.Key) + " " + strconv.Quote(string(ev.Value))
				}
				live = append(live, w)
			case <-ctx.Done():
				t.Fatalf("after kv %v: saw %v; dev stderr:\n%s", s.args, live, errw.String())
			}
		}
	}
	// The recorder has the last write-back before it stops.
	waitFile(t, trace, `"value":"16"`)
	if code := stopRec(); code != 0 {
		t.Fatalf("record exit %d; stderr:\n%s", code, recErr.String())
	}
	r := replayAfterDev(t, stopDev, errw, trace, dir)
	var replayed []string
	writeBacks := 0
	line := regexp.MustCompile(`^\+\d+ms line \d+ thermostat\.lua (SET|DEL) (\S+)(.*)$`)
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("replay line %q; output:\n%s", l, r.stdout)
		}
		if m[2] == "thermostat1/setPoint" {
			writeBacks++
			continue
		}
		replayed = append(replayed, m[1]+" "+m[2]+m[3])
	}
	if fmt.Sprint(replayed) != fmt.Sprint(live) {
		t.Fatalf("replayed writes\n  %s\nlive writes\n  %s\nreplay output:\n%s", strings.Join(replayed, "\n  "), strings.Join(live, "\n  "), r.stdout)
	}
	if writeBacks != 2 {
		t.Fatalf("%d write-backs of the set point, want 2 (30→28, 12→16):\n%s", writeBacks, r.stdout)
	}
}

// keyWatcher is a client of the broker at addr, connected and watching keys.
func keyWatcher(ctx context.Context, t *testing.T, addr, id string, keys ...string) *protocol.Client {
	t.Helper()
	c := protocoltest.Connect(t, protocol.Config{Servers: []string{addr}, ClientID: id})
	for _, k := range keys {
		if err := c.KeyNotify(ctx, []byte(k), protocol.CallOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

// waitFile waits until the file at path contains s.
func waitFile(t *testing.T, path, s string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), s) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := os.ReadFile(path)
	t.Fatalf("%s never contained %s:\n%s", path, s, b)
}

// `ssrun replay --diff` prints the first writes two versions of a rule
// make differently on a trace, with exit status 1; none and 0 for the
// same rule. A corrupt trace is refused with its file and line (exit 2).
func TestReplayDiffCLI(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "t.trace")
	const h = `{"ssrun_trace":1,"start_ms":1767225600000,"keys":["thermostat1/setPoint"]}` + "\n"
	rec := `{"t_ms":1767225601000,"kind":"notify","key":"thermostat1/setPoint","op":"SET","value":"35","version":"001767225601000:00001:StateStore"}` + "\n"
	if err := os.WriteFile(trace, []byte(h+rec), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := thermostatCopy(t), thermostatCopy(t)
	src, err := os.ReadFile(filepath.Join(b, "thermostat.lua"))
	if err != nil {
		t.Fatal(err)
	}
	testutil.WriteFiles(t, b, map[string]string{"thermostat.lua": strings.Replace(string(src), "MIN, MAX  = 16, 28", "MIN, MAX  = 16, 30", 1)})
	if r := runCLI(t, "", "replay", trace, a, "--diff", a); r.code != 0 || !strings.Contains(r.stdout, "no difference: 2 write(s) on 1 record(s)") {
		t.Fatalf("same rules: %+v", r)
	}
	r := runCLI(t, "", "replay", trace, a, "--diff", b)
	if r.code != 1 || !strings.Contains(r.stdout, "write 1 / 1:\n  - +1000ms line 2 thermostat.lua SET hvac1/target \"28\"\n  - +1000ms line 2 thermostat.lua SET thermostat1/setPoint \"28\"\n  + +1000ms line 2 thermostat.lua SET hvac1/target \"30\"") {
		t.Fatalf("changed rule: %+v", r)
	}
	if r := runCLI(t, "", "replay", trace, a, "--json"); r.code != 0 ||
		!strings.Contains(r.stdout, `{"at_ms":1000,"cause":"line 2","rule":"thermostat.lua","op":"SET","key":"hvac1/target","value":"28"}`) {
		t.Fatalf("--json: %+v", r)
	}
	if err := os.WriteFile(trace, []byte(h+rec+"{\"t_ms\":1,\"kind\":\"connected\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "replay", trace, a); r.code != 2 || !strings.Contains(r.stderr, trace+":3: t_ms 1 goes back in time") {
		t.Fatalf("corrupt trace: %+v", r)
	}
}

// `ssrun replay --diff` aligns the writes: a version that makes one write
// more prints one difference, that insertion, not a change of every write
// after it; --json prints it as one object.
func TestReplayDiffAlignsWrites(t *testing.T) {
	trace := filepath.Join(t.TempDir(), "t.trace")
	var tr strings.Builder
	tr.WriteString(`{"ssrun_trace":1,"start_ms":1767225600000,"keys":["in"]}` + "\n")
	for i := 1; i <= 5; i++ {
		fmt.Fprintf(&tr, `{"t_ms":%d,"kind":"notify","key":"in","op":"SET","value":"%d","version":"00%d:00001:StateStore"}`+"\n", 1767225600000+i*1000, i, 1767225600000+i*1000)
	}
	if err := os.WriteFile(trace, []byte(tr.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	rule := func(extra string) string {
		dir := t.TempDir()
		src := "local ss = require(\"ssrun\")\nss.watch(\"in\")\nfunction on_event(ev)\n  ss.set(\"out\", ev.value)\n" + extra + "end\n"
		testutil.WriteFiles(t, dir, map[string]string{"copy.lua": src})
		return dir
	}
	a, b := rule(""), rule("  if ev.value == \"2\" then ss.set(\"audit\", \"two\") end\n")
	r := runBin(t, nil, "replay", trace, a, "--diff", b)
	if r.code != 1 || strings.Count(r.stdout, "\nwrite ") != 1 || strings.Contains(r.stdout, "\n  - ") ||
		!strings.Contains(r.stdout, "in 1 place(s)") ||
		!strings.Contains(r.stdout, "write 3 / 3:\n  + +2000ms line 3 copy.lua SET audit \"two\"\n") {
		t.Fatalf("one write more, want one difference, an insertion: %+v", r)
	}
	r = runBin(t, nil, "replay", trace, a, "--diff", b, "--json")
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var d struct {
		Diff struct {
			A, B           int
			Removed, Added []map[string]any
		}
	}
	if r.code != 1 || len(lines) != 1 {
		t.Fatalf("--diff --json: %+v", r)
	}
	if err := json.Unmarshal([]byte(lines[0]), &d); err != nil || d.Diff.A != 3 || d.Diff.B != 3 || len(d.Diff.Removed) != 0 ||
		len(d.Diff.Added) != 1 || d.Diff.Added[0]["key"] != "audit" || d.Diff.Added[0]["value"] != "two" {
		t.Fatalf("--diff --json: %v %+v\n%s", err, d, r.stdout)
	}
	if r := runBin(t, nil, "replay", trace, a, "--diff", a, "--json"); r.code != 0 || r.stdout != "" {
		t.Fatalf("--diff --json, no difference: %+v", r)
	}
}
