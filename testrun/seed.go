package testrun

import (
	"hash/fnv"
	"math/rand/v2"

	"github.com/ssrun/ssrun/abi"
)

// Rand is the lua.Config Rand of the runtimes that run tests and replays:
// for a rule bound to a test's world, a generator seeded with the case's
// seed and the rule's file name, so every run of a case draws the same
// numbers and one rule's draws do not shift another's. For any other host
// it returns nil (the runtime's default source).
func Rand(h abi.Host) *rand.Rand {
	b, ok := h.(*binding)
	if !ok {
		return nil
	}
	f := fnv.New64a()
	f.Write([]byte(b.name))
	return rand.New(rand.NewPCG(b.w.seed, f.Sum64()))
}
