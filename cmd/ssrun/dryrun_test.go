package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol"
)

// thermostatCopy is a folder holding only the thermostat example's rule.
func thermostatCopy(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "examples", "thermostat", "thermostat.lua"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "thermostat.lua"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// `ssrun run --dry-run` runs the thermostat on live set points and prints
// the writes it would make, with their events; a client watching every key
// it writes is notified of nothing, and the keys keep their values.
func TestRunDryRun(t *testing.T) {
	b := brokertest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "hvac1/target", "20")
	watcher := keyWatcher(ctx, t, b.Addr(), "dry-run-watcher", "hvac1/target", "thermostat1/error", "sentinel")

	out, errw, stop := start(t, "run", thermostatCopy(t), "--broker", b.Addr(), "--dry-run")
	waitOutput(t, out, regexp.MustCompile(`ssrun run: 1 rule\(s\)`))
	if !strings.Contains(out.String(), "dry run: the rules' writes, locks and timers are printed here, never sent to the store") {
		t.Fatalf("no dry-run banner:\n%s", out.String())
	}
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "thermostat1/setPoint", "30")
	waitOutput(t, out, regexp.MustCompile(`(?m)^dry-run: SET hvac1/target "28" \(rule thermostat\.lua, event SET thermostat1/setPoint v=\d{15}:\d{5}:StateStore\)$`))
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "thermostat1/setPoint", "warm")
	waitOutput(t, out, regexp.MustCompile(`(?m)^dry-run: SET thermostat1/error "invalid set point \\"warm\\"" \(rule thermostat\.lua, event SET thermostat1/setPoint v=`))

	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "sentinel", "end")
	for seen := []string{}; ; {
		select {
		case ev := <-watcher.Events():
			if ev.Kind != protocol.EventNotify {
				continue
			}
			if string(ev.Key) == "sentinel" {
				if len(seen) > 0 {
					t.Fatalf("the dry run changed the store: %v", seen)
				}
			} else {
				seen = append(seen, fmt.Sprintf("%s %s=%q", ev.Op, ev.Key, ev.Value))
				continue
			}
		case <-ctx.Done():
			t.Fatalf("no notification of the sentinel; stderr:\n%s", errw.String())
		}
		break
	}
	if r := runCLI(t, "", "kv", "--broker", b.Addr(), "get", "hvac1/target"); r.stdout != "20\n" {
		t.Fatalf("hvac1/target after the dry run: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d; stderr:\n%s", code, errw.String())
	}
}

// With --log-format json, `ssrun dev --dry-run` prints each write as one
// JSON object, the value as text and the event it answered.
func TestDevDryRunJSON(t *testing.T) {
	out, errw, stop := start(t, "dev", thermostatCopy(t), "--listen", "127.0.0.1:0", "--dry-run", "--log-format", "json")
	addr := waitOutput(t, out, regexp.MustCompile(`ssrun dev: state store on (\S+),`))[1]
	runCLI(t, "", "kv", "--broker", addr, "set", "thermostat1/setPoint", "12")
	line := waitOutput(t, out, regexp.MustCompile(`(?m)^\{"dry_run".*\}$`))[0]
	var got struct {
		DryRun    string `json:"dry_run"`
		Rule, Key string
		Value     *string
		Cause     struct{ Key, Op, Version string }
	}
	if err := json.Unmarshal([]byte(line), &got); err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	if got.DryRun != "SET" || got.Rule != "thermostat.lua" || got.Key != "hvac1/target" || got.Value == nil || *got.Value != "16" ||
		got.Cause.Key != "thermostat1/setPoint" || got.Cause.Op != "SET" || got.Cause.Version == "" {
		t.Fatalf("dry-run line %s", line)
	}
	if r := runCLI(t, "", "kv", "--broker", addr, "get", "hvac1/target"); r.code == 0 {
		t.Fatalf("hvac1/target was written by a dry run: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
}

// A dry run does not report a harmless DEL of a missing key as a failure:
// it is printed as changing nothing ("nothing to delete"), not as "not
// staged", the rule's event is not failed, and the writes after it go on.
func TestDevDryRunDelOfMissingKeyIsNoFailure(t *testing.T) {
	dir := t.TempDir()
	rule := "local ss = require(\"ssrun\")\nss.watch(\"in\")\nfunction on_event(ev)\n  ss.del(\"never-set\")\n  ss.vdel(\"never-set\", \"x\")\n  ss.set(\"out\", ev.value)\nend\n"
	testutil.WriteFiles(t, dir, map[string]string{"clean.lua": rule})
	env := []string{"XDG_RUNTIME_DIR=" + t.TempDir()}
	cmd := exec.Command(ssrunBinary(t), "dev", dir, "--listen", "127.0.0.1:0", "--dry-run")
	cmd.Env = append(os.Environ(), env...)
	p := startCmd(t, cmd)
	addr := waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv --broker (\S+) set`))[1]
	if r := runBin(t, nil, "kv", "--broker", addr, "set", "in", "1"); r.code != 0 {
		t.Fatalf("kv set: %+v", r)
	}
	waitOutput(t, p.stdout, regexp.MustCompile(`(?m)^dry-run: SET out "1" \(rule clean\.lua, event SET in v=\S+\)$`))
	out := p.stdout.String()
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^dry-run: DEL never-set \(rule clean\.lua, event SET in v=\S+\): nothing to delete \(not found\)$`),
		regexp.MustCompile(`(?m)^dry-run: VDEL never-set "x" \(rule clean\.lua, event SET in v=\S+\): nothing to delete \(not found\)$`),
	} {
		if !want.MatchString(out) {
			t.Errorf("no line matching %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "not staged") {
		t.Errorf("a harmless delete reported as not staged:\n%s", out)
	}
	r := runBin(t, env, "status", "-o", "json")
	var doc struct {
		Rules []struct {
			Name            string
			Handled, Failed int
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || len(doc.Rules) != 1 || doc.Rules[0].Handled != 1 || doc.Rules[0].Failed != 0 {
		t.Fatalf("status: %v %+v\n%+v", err, doc, r)
	}
}
