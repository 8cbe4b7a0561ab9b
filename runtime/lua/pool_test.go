package lua

import (
	"context"
	"sync"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// The instances of a rule of concurrency > 1 (the host's pool: N Scripts
// started from one Program) share no state: each has its own globals,
// upvalues and modules' tables, and runs its top level once. Calls on
// different instances run at once; each counts only its own events.
func TestPoolInstancesDoNotShareState(t *testing.T) {
	p := compileRule(t, New(Config{}), "pool.lua", `
local ss = require("ssrun")
local n = 0
starts = (starts or 0) + 1
ss.shared = ss.shared or {}
function on_event(ev)
  n = n + 1
  seen = (seen or 0) + 1
  ss.shared[#ss.shared + 1] = ev.value
  print(ev.value, n, seen, starts, #ss.shared)
end`)
	const instances, events = 4, 200
	hosts := make([]*abitest.Host, instances)
	scripts := make([]abi.Script, instances)
	for i := range scripts {
		hosts[i] = abitest.New()
		s, err := p.Start(context.Background(), hosts[i], abi.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		scripts[i] = s
	}
	var wg sync.WaitGroup
	errs := make(chan error, instances)
	for i, s := range scripts {
		wg.Go(func() {
			for range events + i {
				if err := s.Handle(context.Background(), setEvent("k", "x")); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, h := range hosts {
		l := logs(h)
		if len(l) != events+i {
			t.Fatalf("instance %d logged %d lines, want %d", i, len(l), events+i)
		}
		want := "x\t" + itoa(events+i) + "\t" + itoa(events+i) + "\t1\t" + itoa(events+i)
		if got := l[len(l)-1]; got != want {
			t.Errorf("instance %d last line %q, want %q (its own local, global, top level and module table)", i, got, want)
		}
	}
}
