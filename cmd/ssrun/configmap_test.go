package main

import (
	"fmt"
	"testing"
	"time"

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

// The rules of `ssrun dev`, run as a process, follow a Kubernetes ConfigMap
// update: the atomic "..data" swap (the rule's own link never changes)
// replaces the running rule with the new version, and a file new in the
// update is loaded. This is how deploy/kubernetes mounts the rules.
func TestDevFollowsConfigMapSwap(t *testing.T) {
	cm := testutil.NewConfigMapDir(t, map[string]string{"scale.lua": scaleRule(2)})
	p, addr := startDev(t, cm.Dir)
	if r := runCLI(t, "", "kv", "--broker", addr, "set", "in", "21"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	waitKV(t, addr, "out", "42")

	cm.Update(map[string]string{
		"scale.lua": scaleRule(3),
		"copy.lua": `local ss = require("ssrun")
ss.watch("in")
function on_event(ev) if ev.op == "SET" then ss.set("copy", ev.value) end end
`,
	})
	deadline := time.Now().Add(30 * time.Second)
	for i := 1; ; i++ {
		runCLI(t, "", "kv", "--broker", addr, "set", "in", fmt.Sprint(i))
		out := runCLI(t, "", "kv", "--broker", addr, "get", "out").stdout
		cp := runCLI(t, "", "kv", "--broker", addr, "get", "copy").stdout
		if out == fmt.Sprint(3*i)+"\n" && cp == fmt.Sprint(i)+"\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the ..data swap: out=%q copy=%q for in=%d; stderr:\n%s", out, cp, i, p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
