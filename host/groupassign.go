package host

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sort"
)

// assign gives each rule of a group an owner among the live members:
// rendezvous (highest random weight) hashing with bounded loads. Rules are
// placed in a fixed order (by their hash), each on the member that scores
// highest for it among those that own fewer than ceil(R/N) rules yet; so no
// member owns more than ceil(R/N), and a member joining or leaving moves
// few rules (a rule moves only when its favourite member changes or fills
// up). Every host computes the same assignment from the same rules and
// members, with no coordination: disagreement while views differ is
// settled by the ownership leases, which only one host holds at a time.
func assign(rules, members []string) map[string]string {
	out := make(map[string]string, len(rules))
	if len(members) == 0 {
		return out
	}
	cap := (len(rules) + len(members) - 1) / len(members)
	order := append([]string(nil), rules...)
	sort.Slice(order, func(i, j int) bool {
		hi, hj := ruleHash(order[i]), ruleHash(order[j])
		if hi != hj {
			return hi < hj
		}
		return order[i] < order[j]
	})
	load := make(map[string]int, len(members))
	for _, r := range order {
		best, bestScore := "", uint64(0)
		for _, m := range members {
			if load[m] >= cap {
				continue
			}
			if s := score(r, m); best == "" || s > bestScore || (s == bestScore && m < best) {
				best, bestScore = m, s
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

// ruleHash names a rule in the group's keys: the first 16 hex digits of
// the SHA-256 of its file name (a name may hold characters a key should
// not, and the hash keeps keys short).
func ruleHash(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:8])
}
