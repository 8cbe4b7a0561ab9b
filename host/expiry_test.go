package host

import (
	"testing"
	"time"

	"github.com/ssrun/ssrun/protocol"
)

// A rule that re-creates a key with a 1 ms TTL each time it expires loops
// through the store's expiry; the DELETE of an expired write carries the
// lineage of that write, so the loop is damped after MaxHops like any other.
func TestE2EExpiryLoopDamped(t *testing.T) {
	const maxHops = 4
	e := newE2E(t, sandbox{kind: "lua"}, func(o *Config) { o.MaxHops = maxHops })
	e.loadRule("again.lua", []byte(`local ss = require("ssrun")
ss.watch("ttl/k")
ss.watch("ttl/sentinel")
function on_event(ev)
  if ev.key == "ttl/k" and ev.op == "DELETE" then
    assert(ss.set("ttl/k", "again", {ttl = 1}))
  end
end
`))
	if _, err := e.user.Set(e.ctx(), []byte("ttl/k"), []byte("first"), protocol.SetOptions{Expiry: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	// Dropped: the SET of the write at hop maxHops+1, and its expiry.
	waitFor(t, "expiry loop damped", func() bool { return e.host.Stats().LoopsDamped >= 2 })
	// Notifications reach a rule in order: once the sentinel is handled,
	// everything before it was. The external SET (hop 0) and the expiry
	// DELETEs of hops 0..maxHops were handled; nothing re-created the key.
	e.set("ttl/sentinel", "1")
	waitFor(t, "sentinel handled after the loop", func() bool {
		return e.ruleStatus("again.lua").Handled == 1+(maxHops+1)+1
	})
	if _, ok := e.get("ttl/k"); ok {
		t.Fatal("ttl/k still exists: the loop was not broken")
	}
	if n := e.host.Stats().LoopsDamped; n != 2 {
		t.Fatalf("damped %d events, want 2", n)
	}
}

// An external delete of a key a rule wrote with a TTL, before that TTL
// ran out, starts a new chain (hop 0) instead of continuing the writer's.
func TestE2EEarlyDeleteOfTTLKeyStartsFresh(t *testing.T) {
	const maxHops = 2
	e := newE2E(t, sandbox{kind: "lua"}, func(o *Config) { o.MaxHops = maxHops })
	// keep re-creates ttl/x (with a long TTL) whenever it is deleted.
	e.loadRule("keep.lua", []byte(`local ss = require("ssrun")
ss.watch("ttl/x")
function on_event(ev)
  if ev.op == "DELETE" then assert(ss.set("ttl/x", "kept", {ttl = 3600000})) end
end
`))
	e.set("ttl/x", "start")
	// Deleted from outside many more times than MaxHops: every delete is a
	// fresh chain, so the rule re-creates the key every time.
	for i := 0; i < 3*(maxHops+1); i++ {
		if _, err := e.user.Del(e.ctx(), []byte("ttl/x"), protocol.DelOptions{}); err != nil {
			t.Fatal(err)
		}
		e.waitValue("ttl/x", "kept")
	}
	if n := e.host.Stats().LoopsDamped; n != 0 {
		t.Fatalf("external deletes were damped %d times", n)
	}
}
