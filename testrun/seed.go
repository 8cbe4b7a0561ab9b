package testrun

import (
	"hash/fnv"
	"math/rand/v2"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// Rand is the lua.Config Rand of the runtimes that run tests and replays:
// for a rule of a test's host, a generator seeded with the case's
// seed and the rule's file name, so every run of a case draws the same
// numbers and one rule's draws do not shift another's; for a rule in the
// replay of a host trace, the trace's seed (the recording host drew from
// the same generators: HostRecorder.Rand). For any other host it returns
// nil (the runtime's default source).
func Rand(h abi.Host) *rand.Rand {
	if t, ok := h.(*tape); ok { // the replay of a host trace
		return ruleRand(t.d.seed, t.name)
	}
	hh, ok := host.HostOf(h)
	if !ok {
		return nil
	}
	seed, ok := seeds.Load(hh)
	name, named := host.RuleOf(h)
	if !ok || !named {
		return nil
	}
	return ruleRand(seed.(uint64), name)
}

// ruleRand is the generator of rule's math.random under seed.
func ruleRand(seed uint64, rule string) *rand.Rand {
	f := fnv.New64a()
	f.Write([]byte(rule))
	return rand.New(rand.NewPCG(seed, f.Sum64()))
}
