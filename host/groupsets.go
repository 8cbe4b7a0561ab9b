package host

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/ssrun/ssrun/protocol"
)

// The rule sets of a group's members: which shared rule files a host has,
// and what is in them. Each member's roster line names its set by digest
// (grouprules.go); the set itself is stored once per distinct digest, in
//
//	$ssrun/group/NAME/rules/DIGEST  the set: a JSON object, rule file name
//	                                -> content hash
//
// written under the roster lock (fenced with it) before a line names it, and
// deleted under that lock when no line names it any more. The content names
// its key: a host reads a set only for a digest it has not seen, checks that
// the value hashes to its digest, and keeps it in memory.

// ruleSet maps the name of each rule file a member shares to the hash of
// its content (contentHash; "" when the file could not be read).
type ruleSet map[string]string

// has reports whether the set holds the rule name.
func (s ruleSet) has(name string) bool { _, ok := s[name]; return ok }

// digestLen is the length of a set's digest: hex of 128 bits of SHA-256.
const digestLen = 32

// encode returns the set's stored form and its digest. encoding/json writes
// an object's keys sorted, so equal sets encode, and hash, alike.
func (s ruleSet) encode() (digest string, value []byte) {
	if s == nil {
		s = ruleSet{}
	}
	value, err := json.Marshal(map[string]string(s))
	if err != nil { // a map of strings always encodes
		panic(fmt.Sprintf("rule set: %v", err))
	}
	return setDigest(value), value
}

func setDigest(value []byte) string {
	sum := sha256.Sum256(value)
	return hex.EncodeToString(sum[:digestLen/2])
}

// validDigest reports whether d is a set digest: digestLen lower-case hex
// digits.
func validDigest(d string) bool {
	if len(d) != digestLen {
		return false
	}
	for i := range len(d) {
		if c := d[i]; !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// errSetDigest is the error of a stored set whose value does not hash to
// the digest that names it (written by hand, or by something else).
var errSetDigest = errors.New("the value does not hash to its digest")

// decodeRuleSet reads the stored set named digest.
func decodeRuleSet(digest string, value []byte) (ruleSet, error) {
	if setDigest(value) != digest {
		return nil, errSetDigest
	}
	var m map[string]string
	if err := json.Unmarshal(value, &m); err != nil {
		return nil, fmt.Errorf("not a rule set: %w", err)
	}
	for name := range m {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
			return nil, fmt.Errorf("not a rule file name: %q", name)
		}
	}
	return ruleSet(m), nil
}

// contentHash names a rule file's content in a set: the first 16 hex
// digits of its SHA-256 ("" when it cannot be read: the host's load of it
// reports why).
func contentHash(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}

func (g *group) setKey(digest string) string { return g.key("rules/" + digest) }

// ownSet returns this host's set, with its digest and stored form: the
// shared rule files it has now.
func (g *group) ownSet() (ruleSet, string, []byte) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.mine == nil {
		s := make(ruleSet, len(g.hashes))
		for name, h := range g.hashes {
			s[name] = h
		}
		d, v := s.encode()
		g.mine = &storedSet{set: s, digest: d, value: v}
	}
	return g.mine.set, g.mine.digest, g.mine.value
}

// storedSet is a set with its digest and stored form.
type storedSet struct {
	set    ruleSet
	digest string
	value  []byte
}

// setOf returns the set named digest: from memory, or read from the store
// (once: a set's content cannot change under its digest). A set missing or
// unreadable is reported (once per digest) and returned as nil: its
// members are given no rule until it is readable. Only a failed read is an
// error.
func (g *group) setOf(ctx context.Context, digest string) (ruleSet, error) {
	g.mu.Lock()
	s, ok := g.sets[digest]
	g.mu.Unlock()
	if ok {
		return s, nil
	}
	res, err := g.svc.client.Get(ctx, []byte(g.setKey(digest)), protocol.CallOptions{})
	if err != nil {
		return nil, fmt.Errorf("read rule set %s: %w", digest, err)
	}
	if !res.Found {
		err = errors.New("no such key")
	} else if s, err = decodeRuleSet(digest, res.Value); err == nil {
		g.mu.Lock()
		g.sets[digest] = s
		g.mu.Unlock()
		return s, nil
	}
	if g.warnOnce("set " + digest) {
		g.svc.log.Warn("group: a member's rule set is unreadable; it is given no rule until it is", "group", g.name,
			"key", g.setKey(digest), "err", err)
	}
	return nil, nil
}

// memberSets returns the rule set of each live member (nil for one whose
// set is unreadable), this host's (and any with the same digest) being
// mine, and forgets the sets no live member has.
func (g *group) memberSets(ctx context.Context, live []rosterEntry, mine ruleSet, digest string) (map[string]ruleSet, error) {
	out := make(map[string]ruleSet, len(live))
	used := map[string]bool{}
	for _, e := range live {
		if e.id == g.id || e.digest == digest {
			out[e.id] = mine
			continue
		}
		s, err := g.setOf(ctx, e.digest)
		if err != nil {
			return nil, err
		}
		out[e.id] = s
		used[e.digest] = true
	}
	g.mu.Lock()
	for d := range g.sets {
		if !used[d] {
			delete(g.sets, d)
		}
	}
	g.mu.Unlock()
	return out, nil
}

// warnOnce reports whether what was not warned about yet, and notes it.
// The notes are bounded: past maxWarned they start over.
func (g *group) warnOnce(what string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.warned[what] {
		return false
	}
	if len(g.warned) >= maxWarned {
		clear(g.warned)
	}
	g.warned[what] = true
	return true
}

const maxWarned = 1024
