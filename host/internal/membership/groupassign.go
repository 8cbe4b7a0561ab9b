package membership

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
)

// assign gives each rule of a group an owner among the live members, all
// of which have every rule (see AssignAmong).
func assign(rules, members []string) map[string]string {
	all := make(RuleSet, len(rules))
	for _, r := range rules {
		all[r] = ""
	}
	have := make(map[string]RuleSet, len(members))
	for _, m := range members {
		have[m] = all
	}
	return AssignAmong(have)
}

// AssignAmong gives each rule some live member has an owner among the
// members that have it (have: member -> its rule set; a nil set has no
// rule): rendezvous (highest random weight) hashing with bounded loads.
// Rules are placed in a fixed order (those fewer members have first, then
// by their hash), each on the member that has it and scores highest for it
// among those that own fewer than ceil(R/N) rules yet (R rules, N members
// with any); when all that have it are full, on the least loaded of them.
// So when every member has every rule none owns more than ceil(R/N), and a
// member joining or leaving moves few rules (a rule moves only when its
// favourite member changes or fills up). Every host computes the same
// assignment from the same members and sets, with no coordination:
// disagreement while views differ is settled by the ownership leases, which
// only one host holds at a time. A rule no member has gets no owner.
func AssignAmong(have map[string]RuleSet) map[string]string {
	members := make([]string, 0, len(have))
	count := map[string]int{} // rule -> how many members have it
	for m, s := range have {
		if len(s) == 0 {
			continue
		}
		members = append(members, m)
		for r := range s {
			count[r]++
		}
	}
	out := make(map[string]string, len(count))
	if len(members) == 0 {
		return out
	}
	sort.Strings(members)
	cap := (len(count) + len(members) - 1) / len(members)
	type ruleKey struct {
		name, hash string
		n          int
	}
	order := make([]ruleKey, 0, len(count))
	for r, n := range count {
		order = append(order, ruleKey{name: r, hash: RuleHash(r), n: n})
	}
	sort.Slice(order, func(i, j int) bool {
		a, b := order[i], order[j]
		if a.n != b.n {
			return a.n < b.n
		}
		if a.hash != b.hash {
			return a.hash < b.hash
		}
		return a.name < b.name
	})
	load := make(map[string]int, len(members))
	for _, rk := range order {
		r := rk.name
		best, bestScore, bestUnder := "", uint64(0), false
		for _, m := range members {
			if !have[m].Has(r) {
				continue
			}
			under := load[m] < cap
			if best != "" && bestUnder && !under {
				continue // a member under the bound beats every full one
			}
			s := score(r, m)
			var better bool
			switch {
			case best == "":
				better = true
			case under != bestUnder:
				better = under
			case under: // both under the bound: the higher score
				better = s > bestScore
			default: // both full: the less loaded, then the higher score
				better = load[m] < load[best] || load[m] == load[best] && s > bestScore
			}
			if better {
				best, bestScore, bestUnder = m, s, under
			}
		}
		out[r] = best
		load[best]++
	}
	return out
}

// score is the rendezvous weight of member m for rule r.
func score(r, m string) uint64 {
	h := sha256.New()
	h.Write([]byte(r))
	h.Write([]byte{0})
	h.Write([]byte(m))
	return binary.BigEndian.Uint64(h.Sum(nil))
}

// RuleHash names a rule in the group's keys: the first 16 hex digits of
// the SHA-256 of its file name (a name may hold characters a key should
// not, and the hash keeps keys short).
func RuleHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:8])
}
