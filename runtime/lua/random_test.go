package lua

import (
	"context"
	"math/rand/v2"
	"testing"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// draws starts a rule that sets "n" to three draws of math.random and
// returns the value, using rt.
func draws(t *testing.T, rt *Runtime) string {
	t.Helper()
	h := abitest.New()
	s, err := compileRule(t, rt, "rand.lua", `local ss = require("ssrun")
assert(ss.set("n", math.random(1000000) .. " " .. math.random(5, 9) .. " " .. math.random()))
function on_event() end`).Start(context.Background(), h, abi.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	v, _ := h.Value("n")
	return string(v)
}

// Config.Rand gives each script its own source: the same seed draws the
// same numbers, another seed others; the host passed is the script's.
func TestConfigRand(t *testing.T) {
	seeded := func(seed uint64) *Runtime {
		return New(Config{Rand: func(h abi.Host) *rand.Rand {
			if _, ok := h.(*abitest.Host); !ok {
				t.Errorf("Rand got %T, want the script's host", h)
			}
			return rand.New(rand.NewPCG(seed, 0))
		}})
	}
	a, b, c := draws(t, seeded(7)), draws(t, seeded(7)), draws(t, seeded(8))
	if a != b {
		t.Errorf("seed 7 drew %q, then %q", a, b)
	}
	if a == c {
		t.Errorf("seeds 7 and 8 both drew %q", a)
	}
	// Without Rand, or when it returns nil, math.random still works.
	for _, rt := range []*Runtime{New(Config{}), New(Config{Rand: func(abi.Host) *rand.Rand { return nil }})} {
		if draws(t, rt) == "" {
			t.Error("no draw")
		}
	}
}
