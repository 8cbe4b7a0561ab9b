package echo

import (
	"fmt"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/testutil"
)

func TestMain(m *testing.M) { testutil.Main(m) }

func set(key, version string) abi.Event { return abi.Event{Key: key, Op: abi.OpSet, Version: version} }
func del(key string) abi.Event          { return abi.Event{Key: key, Op: abi.OpDelete} }

// Each write is the echo of one notification only: a version written is
// consumed once, a delete owes one DELETE per delete; other versions and
// keys are not echoes; forgetting a key and keeping only watched keys drop
// what is owed; at most maxEchoes versions are remembered per key.
func TestPending(t *testing.T) {
	p := New()
	p.Wrote("a", "v1", false)
	p.Wrote("a", "v2", false)
	p.Wrote("b", "", true)
	for i, c := range []struct {
		ev   abi.Event
		echo bool
	}{
		{set("a", "v2"), true}, {set("a", "v2"), false}, {set("a", "v3"), false},
		{set("b", "v1"), false}, {del("a"), false}, {del("b"), true}, {del("b"), false},
		{set("a", "v1"), true},
	} {
		if got := p.Consume(c.ev); got != c.echo {
			t.Fatalf("%d: Consume(%s %s %s) = %v, want %v", i, c.ev.Op, c.ev.Key, c.ev.Version, got, c.echo)
		}
	}
	p.Wrote("a", "v4", false)
	p.Wrote("a", "", true)
	p.Forget("a")
	if p.Consume(set("a", "v4")) || p.Consume(del("a")) {
		t.Fatal("an echo owed on a forgotten key was consumed")
	}
	p.Wrote("a", "v5", false)
	p.Wrote("c", "v1", false)
	p.KeepSets(map[string]abi.WatchOptions{"c": {}})
	if p.Consume(set("a", "v5")) || !p.Consume(set("c", "v1")) {
		t.Fatal("KeepSets kept a key not watched, or dropped one watched")
	}
	for i := range maxEchoes + 1 {
		p.Wrote("d", fmt.Sprint("v", i), false)
	}
	if p.Consume(set("d", "v0")) || !p.Consume(set("d", "v1")) {
		t.Fatalf("more than %d versions remembered, or the wrong ones dropped", maxEchoes)
	}
}
