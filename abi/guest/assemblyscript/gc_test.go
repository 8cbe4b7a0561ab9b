package assemblyscript

import (
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// garbageLimit is 3 pages: the module needs 2 (its static data, 32 KiB of
// shadow stack, the heap), and a build whose collector never runs (the
// stub runtime) fails TestGarbageBounded in its first event.
const garbageLimit = 192 << 10

// TestGarbageBounded: the garbage of many calls is collected as it is
// made, with the SDK's GC granularity (asconfig.json): 400 events of 256
// gets and 256 sets each (about 40 MB of results allocated) run in a
// memory limit of garbageLimit.
func TestGarbageBounded(t *testing.T) {
	h := abitest.New()
	h.Put("bench/k", []byte("0123456789abcdef"))
	s := start(t, h, abi.Limits{MemoryBytes: garbageLimit})
	for i := range 400 {
		for _, verb := range []string{"get", "set"} {
			if err := s.Handle(t.Context(), benchEvent(verb, 256)); err != nil {
				t.Fatalf("event %d (%s): %v", i, verb, err)
			}
		}
	}
}
