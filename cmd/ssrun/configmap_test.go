package main

import (
	"fmt"
	"regexp"
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// scaleRule is a Lua rule that writes in*factor to out.
func scaleRule(factor int) string {
	return fmt.Sprintf(`local ss = require("ssrun")
ss.watch("in")
function on_event(ev)
  if ev.op == "SET" then ss.set("out", tostring(tonumber(ev.value) * %d)) end
end
`, factor)
}

// copyRule is a Lua rule that copies in to copy.
const copyRule = `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) if ev.op == "SET" then ss.set("copy", ev.value) end end
`

// The rules of `ssrun dev` and `ssrun run`, run as processes, follow a
// Kubernetes ConfigMap volume's updates: the atomic "..data" swap (the
// rule's own link never changes) replaces the running rule with the new
// version, a file new in the update is loaded, and a file gone in the next
// is stopped. This is how deploy/kubernetes mounts the rules.
func TestConfigMapSwap(t *testing.T) {
	t.Run("dev", func(t *testing.T) {
		cm := testutil.NewConfigMapDir(t, map[string]string{"scale.lua": scaleRule(2)})
		p, addr := startDev(t, cm.Dir)
		followsSwaps(t, p, addr, cm)
	})
	t.Run("run", func(t *testing.T) {
		cm := testutil.NewConfigMapDir(t, map[string]string{"scale.lua": scaleRule(2)})
		addr := brokertest.Start(t).Addr()
		p := startProc(t, "run", cm.Dir, "--broker", addr)
		waitOutput(t, p.stdout, regexp.MustCompile(`ssrun run: 1 rule\(s\) from `))
		followsSwaps(t, p, addr, cm)
	})
}

// followsSwaps drives the updates of TestConfigMapSwap on p, which runs the
// rules of cm on the broker at addr.
func followsSwaps(t *testing.T, p *proc, addr string, cm *testutil.ConfigMapDir) {
	t.Helper()
	if r := runCLI(t, "", "kv", "--broker", addr, "set", "in", "21"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	waitKV(t, addr, "out", "42")

	cm.Update(map[string]string{"scale.lua": scaleRule(3), "copy.lua": copyRule})
	i := 0
	testutil.WaitFor(t, "the new scale.lua and copy.lua to run", func() bool {
		i++
		runCLI(t, "", "kv", "--broker", addr, "set", "in", fmt.Sprint(i))
		out := runCLI(t, "", "kv", "--broker", addr, "get", "out").stdout
		cp := runCLI(t, "", "kv", "--broker", addr, "get", "copy").stdout
		return out == fmt.Sprint(3*i)+"\n" && cp == fmt.Sprint(i)+"\n"
	})

	cm.Update(map[string]string{"scale.lua": scaleRule(3)})
	waitOutput(t, p.stderr, regexp.MustCompile(`rule stopped.*rule=copy\.lua`))
	runCLI(t, "", "kv", "--broker", addr, "set", "in", "1000")
	waitKV(t, addr, "out", "3000")
	if r := runCLI(t, "", "kv", "--broker", addr, "get", "copy"); r.stdout == "1000\n" {
		t.Fatalf("copy.lua still runs after its file left the ConfigMap; stderr:\n%s", p.stderr.String())
	}
}
