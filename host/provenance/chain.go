// Package provenance says why a key has its value: the chains of rule writes
// that lead to an event (Lineage, Step, Origin) and the journal of each key's
// last rule write (Journal, Write, Cause), which ssrun why and the admin
// endpoint's /why serve.
package provenance

import "strings"

// A chain is the path of rule writes that led to an event: rule A wrote a
// key B watches, B wrote one C watches, and so on, from a change made
// outside the rules (its origin). The feedback-loop damper (host/internal/lineage)
// follows chains to stop loops; the provenance journal (journal.go) keeps
// them to say why a key has its value.

// Step is one rule write along a chain of rules triggering rules.
type Step struct {
	Rule    string `json:"rule"`
	Key     string `json:"key"`
	Op      string `json:"op"`                // SET, DEL or VDEL
	Version string `json:"version,omitempty"` // the version a SET created
}

// Origin is a change from outside the host's rules: a write by another
// client, or by the store itself (an expiry). Client is the writer's MQTT
// client id when the store's notification names it (ssrun's embedded
// broker does; Azure IoT Operations may not), else empty.
type Origin struct {
	Key     string `json:"key"`
	Op      string `json:"op"` // SET or DELETE, as notified
	Version string `json:"version"`
	Client  string `json:"client,omitempty"`
}

// maxChain is the most steps a chain keeps: the latest.
const maxChain = 8

// Lineage is an event's place in a chain: hops from its origin, and
// the steps (a chain longer than maxChain keeps its last steps, and hop
// still counts them all).
type Lineage struct {
	Hop    int
	Steps  []Step  // the rules' writes along the path, oldest first (the last maxChain)
	Origin *Origin // the outside change that started the path; nil for a timer or lock event
}

// Extend returns a new chain: the last maxChain-1 steps of e's, then s.
func (e Lineage) Extend(s Step) []Step {
	chain := e.Steps
	if len(chain) >= maxChain {
		chain = chain[len(chain)-maxChain+1:]
	}
	return append(append(make([]Step, 0, len(chain)+1), chain...), s)
}

// Describe renders a chain for a log line, e.g. "a.lua -> b.lua -> a.lua".
func Describe(chain []Step) string {
	names := make([]string, len(chain))
	for i, s := range chain {
		names[i] = s.Rule
	}
	return strings.Join(names, " -> ")
}
