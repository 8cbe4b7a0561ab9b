package host

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host/internal/timers"
	"github.com/ssrun/ssrun/protocol"
)

// An index value that does not decode (another format version's, or
// damage) is never overwritten: arming a timer whose name falls in an
// unreadable shard fails with STORE_ERROR naming the key, and the value
// stays byte for byte (before, the arm replaced it, losing the timers it
// listed); names in other shards arm as usual. An unreadable directory
// stays as it is too, through arms and cancels.
func TestUnreadableTimerIndexKept(t *testing.T) {
	e, _ := newTimerEnv(t)
	const rule = "skew.gorule"
	x, y := "x", "y"
	for timers.TimerShard(y) == timers.TimerShard(x) {
		y += "y"
	}
	junkShard := []byte("\x02names of a newer format")
	junkDir := []byte("\x02a newer directory")
	for key, v := range map[string][]byte{timers.TimerShardKey(rule, timers.TimerShard(x)): junkShard, timers.TimerDirKey(rule): junkDir} {
		if _, err := e.user.Set(e.ctx(), []byte(key), v, protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tr := e.loadTimerRule("skew")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := tr.h.Timer(ctx, x, time.Hour, abi.TimerOptions{})
	if abi.StatusOf(err) != abi.StatusStoreError || !strings.Contains(err.Error(), timers.TimerShardKey(rule, timers.TimerShard(x))) {
		t.Errorf("timer %q in the unreadable shard: %v, want STORE_ERROR naming its key", x, err)
	}
	tr.arm(t, y, time.Hour, abi.TimerOptions{})
	if err := tr.h.Cancel(ctx, y); err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string][]byte{timers.TimerShardKey(rule, timers.TimerShard(x)): junkShard, timers.TimerDirKey(rule): junkDir} {
		res, err := e.user.Get(e.ctx(), []byte(key), protocol.CallOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if string(res.Value) != string(want) {
			t.Errorf("%s = %q, want it kept as %q", key, res.Value, want)
		}
	}
	if _, _, _, found := e.record(rule, x); found {
		t.Errorf("a record of %q was written", x)
	}
}
