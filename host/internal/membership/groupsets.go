// Package membership is a group's shared data, as the hosts store and read
// it: the roster and each member's rule set (their encodings, fuzzed), which
// member owns which rule, what an owned rule handled (its progress), and the
// versions of rules a member withdrew as they failed to load there.
package membership

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The stored forms of a group's membership (host/internal/group): the
// roster's lines and the members' rule sets.
//
// The roster's lines: "ID DIGEST", one member a line, where ID is the
// member's client id and DIGEST names the set of shared rule files it has
// (below). Hosts of a group may differ in their rule files: a rule is
// assigned only among the live members whose set has it (AssignAmong), and
// a rule whose content differs between hosts runs, on whichever host owns
// it, in that host's version. A version that fails to load on its owner is
// left out of that host's set while another member offers the rule
// (groupfailed.go).
//
// The roster is a key any client of the store may write: a line that does
// not parse (an older ssrun's "ID" alone, or anything else) is ignored,
// with a warning once per line (more than 8 of them: once for the whole
// roster, host/internal/group), and dropped at the next edit of the roster.

// RosterEntry is one member's line.
type RosterEntry struct{ ID, Digest string }

// maxMemberID bounds a member id (an MQTT client id) in the roster.
const maxMemberID = 1024

// ParseRoster returns the roster's members, sorted by id, and its lines
// that are not members, each with why. A member listed twice keeps its
// first line.
func ParseRoster(b []byte) (entries []RosterEntry, bad []BadLine) {
	seen := map[string]bool{}
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		why := ""
		switch {
		case len(f) == 1:
			why = "no rule set digest (a host of an older ssrun? every host of a group must run the same version)"
		case len(f) != 2:
			why = "want \"ID DIGEST\""
		case !validMemberID(f[0]):
			why = "not a member id"
		case !validDigest(f[1]):
			why = fmt.Sprintf("not a rule set digest (%d hex digits)", digestLen)
		case seen[f[0]]:
			why = "the member is listed twice"
		}
		if why != "" {
			bad = append(bad, BadLine{Line: line, Why: why})
			continue
		}
		seen[f[0]] = true
		entries = append(entries, RosterEntry{ID: f[0], Digest: f[1]})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].ID < entries[j].ID })
	return entries, bad
}

// BadLine is a roster line that names no member, and why.
type BadLine struct{ Line, Why string }

// validMemberID reports whether id can be a member's: printable UTF-8, at
// most maxMemberID bytes (no white space: the fields are split on it).
func validMemberID(id string) bool {
	if id == "" || len(id) > maxMemberID || !utf8.ValidString(id) {
		return false
	}
	for _, r := range id {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

// FormatRoster writes entries (sorted, one line per member) as the
// roster's value.
func FormatRoster(entries []RosterEntry) []byte {
	var b strings.Builder
	for i, e := range entries {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(e.ID)
		b.WriteByte(' ')
		b.WriteString(e.Digest)
	}
	return []byte(b.String())
}

// WithEntry returns entries with id's line replaced by (or, if absent,
// added as) e, sorted.
func WithEntry(entries []RosterEntry, e RosterEntry) []RosterEntry {
	out := slices.DeleteFunc(slices.Clone(entries), func(x RosterEntry) bool { return x.ID == e.ID })
	out = append(out, e)
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// EntryOf returns id's line in entries.
func EntryOf(entries []RosterEntry, id string) (RosterEntry, bool) {
	for _, e := range entries {
		if e.ID == id {
			return e, true
		}
	}
	return RosterEntry{}, false
}

// The rule sets of a group's members: which shared rule files a host has,
// and what is in them. Each member's roster line names its set by digest;
// the set itself is stored once per distinct digest, in
//
//	$ssrun/group/NAME/rules/DIGEST  the set: a JSON object, rule file name
//	                                -> content hash
//
// written under the roster lock (fenced with it) before a line names it, and
// deleted under that lock when no line names it any more. The content names
// its key: a host reads a set only for a digest it has not seen, checks that
// the value hashes to its digest, and keeps it in memory
// (host/internal/group/rules.go).

// RuleSet maps the name of each rule file a member shares to the hash of
// its content (group.Host.ContentHash; "" when the file could not be read).
type RuleSet map[string]string

// Has reports whether the set holds the rule name.
func (s RuleSet) Has(name string) bool { _, ok := s[name]; return ok }

// digestLen is the length of a set's digest: hex of 128 bits of SHA-256.
const digestLen = 32

// Encode returns the set's stored form and its digest. encoding/json writes
// an object's keys sorted, so equal sets encode, and hash, alike.
func (s RuleSet) Encode() (digest string, value []byte) {
	if s == nil {
		s = RuleSet{}
	}
	value, err := json.Marshal(map[string]string(s))
	if err != nil { // a map of strings always encodes
		panic(fmt.Sprintf("rule set: %v", err))
	}
	return SetDigest(value), value
}

// SetDigest is the digest that names a stored rule set of value (its key's
// last part).
func SetDigest(value []byte) string {
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

// DecodeRuleSet reads the stored set named digest.
func DecodeRuleSet(digest string, value []byte) (RuleSet, error) {
	if SetDigest(value) != digest {
		return nil, errSetDigest
	}
	var m map[string]string
	if err := json.Unmarshal(value, &m); err != nil {
		return nil, fmt.Errorf("not a rule set: %w", err)
	}
	if m == nil { // JSON null: no host stores it (an empty set is {})
		return nil, errors.New("not a rule set: not a JSON object")
	}
	for name := range m {
		if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00") {
			return nil, fmt.Errorf("not a rule file name: %q", name)
		}
	}
	return RuleSet(m), nil
}

// StoredSet is a set with its digest and stored form.
type StoredSet struct {
	Set    RuleSet
	Digest string
	Value  []byte
}
