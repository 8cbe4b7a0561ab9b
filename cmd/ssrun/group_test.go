package main

import (
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// --group with --dry-run is refused: a dry run cannot hold leases.
func TestRunGroupRefusesDryRun(t *testing.T) {
	r := runCLI(t, "", "run", t.TempDir(), "--broker", "127.0.0.1:1", "--group", "g", "--dry-run")
	if r.code != 2 || !strings.Contains(r.stderr, "--group and --dry-run") {
		t.Fatalf("exit %d, stderr %q; want usage error naming both flags", r.code, r.stderr)
	}
}

// Two `ssrun run --group` hosts on one broker share a Lua rule: it runs
// (on one of them), and a bad group name is refused with the name.
func TestRunGroupSharesRule(t *testing.T) {
	b := brokertest.Start(t)
	dir := t.TempDir()
	src := "local ss = require(\"ssrun\")\nss.watch(\"in\")\nfunction on_event(ev)\n  if ev.op == \"SET\" then ss.set(\"out\", tostring(tonumber(ev.value) * 2)) end\nend\n"
	testutil.WriteFiles(t, dir, map[string]string{"double.lua": src})
	if r := runCLI(t, "", "run", dir, "--broker", b.Addr(), "--group", "a/b"); r.code == 0 || !strings.Contains(r.stderr, `group "a/b"`) {
		t.Fatalf("bad group name: exit %d, stderr %q", r.code, r.stderr)
	}
	_, errA, stopA := start(t, "run", dir, "--broker", b.Addr(), "--group", "g", "--group-ttl", "2s")
	_, errB, stopB := start(t, "run", dir, "--broker", b.Addr(), "--group", "g", "--group-ttl", "2s")
	testutil.WaitFor(t, "a host running the rule", func() bool {
		return strings.Contains(errA.String()+errB.String(), "group: rule taken over")
	})
	runCLI(t, "", "kv", "--broker", b.Addr(), "set", "in", "21")
	waitKV(t, b.Addr(), "out", "42")
	for _, stop := range []func() int{stopA, stopB} {
		if code := stop(); code != 0 {
			t.Fatalf("run exit %d; stderr:\n%s\n%s", code, errA.String(), errB.String())
		}
	}
}
