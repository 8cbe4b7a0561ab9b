package main

import (
	"context"
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
)

// fencedPump takes the lease pump/leader (for a minute: no renewal during
// the test), writes the level it got to pump/command fenced with it and
// the host's clock to pump/at; a refused write is reported in
// pump/refused with its status.
const fencedPump = `local ss = require("ssrun")
ss.watch("pump/level")
function on_event(ev)
  if ev.op ~= "SET" then return end
  local token, msg, code = ss.lock("pump/leader", 60000)
  if not token then error(tostring(code) .. ": " .. tostring(msg)) end
  local ok, msg, code = ss.set("pump/command", ev.value, {fence = "pump/leader"})
  if not ok then
    ss.set("pump/refused", code .. " " .. ev.value)
    return
  end
  ss.set("pump/at", tostring(ss.now()))
end
`

// recordingDev starts `ssrun dev --record` on the rules in dir and waits
// until its n rules are loaded: the broker's address, the trace file,
// dev's stderr and the function that stops dev (its exit status).
func recordingDev(t *testing.T, dir string, n int) (addr, trace string, errw *testutil.Buffer, stop func() int) {
	t.Helper()
	trace = filepath.Join(t.TempDir(), "live.trace")
	out, errw, stop := start(t, "dev", dir, "--listen", "127.0.0.1:0", "--record", trace)
	addr = waitOutput(t, out, regexp.MustCompile(`ssrun dev: state store on (\S+),`))[1]
	waitOutput(t, out, regexp.MustCompile(fmt.Sprintf(`%d rule\(s\)`, n)))
	return addr, trace, errw, stop
}

// replayAfterDev stops `ssrun dev` (it must exit 0: its recording is whole
// then) and returns `ssrun replay trace dir`, which must exit 0 too.
func replayAfterDev(t *testing.T, stopDev func() int, errw *testutil.Buffer, trace, dir string) result {
	t.Helper()
	if code := stopDev(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
	r := runCLI(t, "", "replay", trace, dir)
	if r.code != 0 {
		t.Fatalf("replay: %+v", r)
	}
	return r
}

// A live `ssrun dev --record` session, replayed: the writes ssrun replay prints
// as applied are exactly the writes a watcher saw the host make, in order,
// and the fenced write the store refused live (another client took the
// lease and wrote with a newer token) is FENCED in the replay too, with
// no difference from the recording. 100 replays print the same bytes.
func TestDevRecordReplaysLiveWrites(t *testing.T) {
	dir := thermostatCopy(t)
	testutil.WriteFiles(t, dir, map[string]string{"pump.lua": fencedPump})
	addr, trace, errw, stopDev := recordingDev(t, dir, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watcher := keyWatcher(ctx, t, addr, "record-watcher", "hvac1/target", "thermostat1/error", "thermostat1/setPoint",
		"pump/command", "pump/at", "pump/refused")
	kv := func(args ...string) string {
		t.Helper()
		r := runCLI(t, "", append([]string{"kv", "--broker", addr}, args...)...)
		if r.code != 0 {
			t.Fatalf("kv %v: %+v", args, r)
		}
		return strings.TrimSpace(r.stdout)
	}
	// The host's writes (its client is ssrun-dev-*), as the watcher saw
	// them; wait for n more.
	var live []string
	await := func(n int) {
		t.Helper()
		for n > 0 {
			select {
			case ev := <-watcher.Events():
				if ev.Kind != protocol.EventNotify || !strings.HasPrefix(ev.Source, "ssrun-dev-") {
					continue
				}
				n--
				w := "DEL " + string(ev.Key)
				if ev.Op == protocol.OpSet {
					w = "SET " + string(ev.Key) + " " + strconv.Quote(string(ev.Value))
				}
				live = append(live, w)
			case <-ctx.Done():
				t.Fatalf("saw %v; dev stderr:\n%s", live, errw.String())
			}
		}
	}
	kv("set", "thermostat1/setPoint", "30") // target 28, the write-back 28
	await(2)
	kv("set", "pump/level", "40") // lock, pump/command 40, pump/at
	await(2)
	kv("set", "thermostat1/setPoint", "warm") // error
	await(1)
	// Another client takes the lease behind the rule's back and writes
	// with the newer token: the rule's next fenced write is refused.
	token := strings.TrimPrefix(kv("set", "pump/leader", "other"), "OK ")
	kv("set", "pump/command", "manual", "--fence", token)
	kv("set", "pump/level", "60") // FENCED: pump/refused
	await(1)
	waitFile(t, trace, `"key":"pump/refused"`)
	r := replayAfterDev(t, stopDev, errw, trace, dir)
	if want := `[SET hvac1/target "28" SET thermostat1/setPoint "28" SET pump/command "40" SET pump/at`; !strings.HasPrefix(fmt.Sprint(live), want) ||
		live[len(live)-1] != `SET pump/refused "FENCED 60"` {
		t.Fatalf("live writes %v", live)
	}
	var applied []string
	fenced := 0
	line := regexp.MustCompile(`^\+\d+ms line \d+ (?:thermostat|pump)\.lua ((?:SET|DEL) \S+(?: "(?:[^"\\]|\\.)*")?)( [A-Z_]+)?$`)
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		m := line.FindStringSubmatch(l)
		switch {
		case m == nil:
			t.Fatalf("replay line %q; output:\n%s", l, r.stdout)
		case m[2] == "":
			applied = append(applied, m[1])
		case m[2] == " FENCED" && m[1] == `SET pump/command "60"`:
			fenced++
		}
	}
	if fmt.Sprint(applied) != fmt.Sprint(live) {
		t.Fatalf("replayed writes\n  %s\nlive writes\n  %s\nreplay output:\n%s", strings.Join(applied, "\n  "), strings.Join(live, "\n  "), r.stdout)
	}
	if fenced != 1 {
		t.Fatalf("the refused write is not FENCED in the replay:\n%s", r.stdout)
	}
	for i := range 100 {
		if again := runCLI(t, "", "replay", trace, dir); again.code != 0 || again.stdout != r.stdout {
			t.Fatalf("replay %d differs:\n%s\nfirst:\n%s", i+2, again.stdout, r.stdout)
		}
	}
}

// Replaying a host trace on a rule that asks differently prints the
// writes, then each difference from the recording, with exit status 1;
// --diff against the recorded rule reports the changed write.
func TestReplayHostTraceDifferences(t *testing.T) {
	dir := t.TempDir()
	trace := filepath.Join(dir, "h.trace")
	const h = `{"ssrun_trace":2,"start_ms":1767225600000,"keys":[],"source":"host"}` + "\n"
	recs := `{"t_ms":1767225600000,"kind":"call","rule":"r.lua","verb":"watch","key":"in","status":"OK"}
{"t_ms":1767225601000,"kind":"event","rule":"r.lua","key":"in","op":"SET","value":"7"}
{"t_ms":1767225601001,"kind":"call","rule":"r.lua","verb":"set","key":"out","value":"7","status":"OK","version":"v"}
`
	if err := os.WriteFile(trace, []byte(h+recs), 0o644); err != nil {
		t.Fatal(err)
	}
	rule := func(expr string) string {
		d := t.TempDir()
		src := `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) ss.set("out", ` + expr + `) end
`
		testutil.WriteFiles(t, d, map[string]string{"r.lua": src})
		return d
	}
	same, changed := rule("ev.value"), rule(`ev.value .. "0"`)
	if r := runCLI(t, "", "replay", trace, same); r.code != 0 || r.stdout != "+1000ms line 3 r.lua SET out \"7\"\n" {
		t.Fatalf("replay of the recorded rule: %+v", r)
	}
	r := runCLI(t, "", "replay", trace, changed)
	want := `+1000ms line 3 r.lua SET out "70"
the rules in ` + changed + ` part from the recording ` + trace + `:
  line 3 r.lua: the live run made set out "7" -> OK (line 4), the replay set out "70"
`
	if r.code != 1 || r.stdout != want {
		t.Fatalf("replay of a changed rule: %+v\nwant stdout:\n%s", r, want)
	}
	if r := runCLI(t, "", "replay", trace, same, "--diff", changed); r.code != 1 || !strings.Contains(r.stdout, `+ +1000ms line 3 r.lua SET out "70"`) {
		t.Fatalf("replay --diff: %+v", r)
	}
}

// A rule that draws math.random, recorded by `ssrun dev --record` and
// replayed: the replay draws the same numbers (the trace holds the seed of
// the rules' generators), so its writes are the live ones and nothing
// parts from the recording. Before the seed was recorded, the replay drew
// from seed 0 and every write differed.
func TestDevRecordReplaysRandomDraws(t *testing.T) {
	dir := t.TempDir()
	const dice = `local ss = require("ssrun")
ss.watch("dice/roll")
function on_event(ev)
  if ev.op == "SET" then ss.set("dice/out", ev.value .. ":" .. math.random(1000000000)) end
end
`
	testutil.WriteFiles(t, dir, map[string]string{"dice.lua": dice})
	addr, trace, errw, stopDev := recordingDev(t, dir, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watcher := keyWatcher(ctx, t, addr, "dice-watcher", "dice/out")
	var live []string
	for i := range 5 {
		if r := runCLI(t, "", "kv", "--broker", addr, "set", "dice/roll", strconv.Itoa(i)); r.code != 0 {
			t.Fatalf("kv set: %+v", r)
		}
		for n := len(live); len(live) == n; {
			select {
			case ev := <-watcher.Events():
				if ev.Kind == protocol.EventNotify && ev.Op == protocol.OpSet {
					live = append(live, `SET dice/out `+strconv.Quote(string(ev.Value)))
				}
			case <-ctx.Done():
				t.Fatalf("saw %v; dev stderr:\n%s", live, errw.String())
			}
		}
	}
	waitFile(t, trace, `"key":"dice/out","value":"4:`)
	r := replayAfterDev(t, stopDev, errw, trace, dir)
	var replayed []string
	for _, l := range strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n") {
		if _, w, ok := strings.Cut(l, " dice.lua "); ok {
			replayed = append(replayed, w)
		}
	}
	if fmt.Sprint(replayed) != fmt.Sprint(live) {
		t.Fatalf("replayed writes %v, live %v; output:\n%s", replayed, live, r.stdout)
	}
}
