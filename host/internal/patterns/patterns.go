// Package patterns is the part of a host's pattern watches that does no
// I/O: a watched pattern compiled and checked against a rule's permissions,
// and the schedule of the rescans that find keys created after a pattern's
// first scan. The host's pattern watches (host/internal/patternwatch) scan
// the store, register the keys and deliver their events.
package patterns

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/ssrun/ssrun/internal/glob"
)

// MaxLen bounds a pattern, as the store bounds a key it lists (64 KiB): a
// longer pattern can match no key the store lists.
const MaxLen = 64 << 10

// ErrInvalid is the error of a malformed pattern; ErrDenied of a pattern
// no key the rule may read can match.
var (
	ErrInvalid = errors.New("invalid pattern")
	ErrDenied  = errors.New("pattern outside the rule's permissions")
)

// Pattern is a compiled pattern: the glob of the ACL's keyType Pattern and
// of the store's SCAN (internal/glob).
type Pattern struct {
	Src string
	g   glob.Glob
}

// Compile compiles src, refusing an empty pattern, one longer than MaxLen
// and a malformed one (an unterminated `[`, a trailing `\`) with an error
// that wraps ErrInvalid and says what is wrong.
func Compile(src string) (Pattern, error) {
	switch {
	case src == "":
		return Pattern{}, fmt.Errorf("%w: empty", ErrInvalid)
	case len(src) > MaxLen:
		return Pattern{}, fmt.Errorf("%w: %d bytes, more than %d", ErrInvalid, len(src), MaxLen)
	}
	g, err := glob.Compile(src, nil)
	if err != nil {
		return Pattern{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return Pattern{Src: src, g: g}, nil
}

// Match reports whether key matches p.
func (p Pattern) Match(key string) bool { return p.g.MatchString(key, nil) }

// Prefix is the literal text every key p matches starts with.
func (p Pattern) Prefix() string { return p.g.Prefix() }

// Check refuses p (an error wrapping ErrDenied) when no key it matches can
// be one a rule may read: every such key is under reserved, or p's literal
// beginning shares no beginning with any of perms (doublestar patterns, as
// in ssrun.yaml's read; nil allows every key, empty none). The check is on
// literal beginnings only, so a pattern it lets through may still match no
// readable key; those keys are filtered one by one.
func (p Pattern) Check(reserved string, perms []string) error {
	pre := p.Prefix()
	if strings.HasPrefix(pre, reserved) {
		return fmt.Errorf("%w: keys under %s are reserved for the host", ErrDenied, reserved)
	}
	if perms == nil {
		return nil
	}
	for _, perm := range perms {
		lit := literal(perm)
		if strings.HasPrefix(pre, lit) || strings.HasPrefix(lit, pre) {
			return nil
		}
	}
	return fmt.Errorf("%w: no key it matches can be read (read permissions %q)", ErrDenied, perms)
}

// literal is the text before the first special character of a doublestar
// pattern.
func literal(perm string) string {
	if i := strings.IndexAny(perm, `*?[{\`); i >= 0 {
		return perm[:i]
	}
	return perm
}

// Schedule is when each pattern is rescanned next: every interval of it
// from the time it was set. It is not safe for concurrent use.
type Schedule struct {
	every map[string]time.Duration
	next  map[string]time.Time
}

// Set makes pattern due every d from now (d <= 0: never; it is dropped).
// Setting the same interval again keeps the time it is due.
func (s *Schedule) Set(pattern string, d time.Duration, now time.Time) {
	if s.every == nil {
		s.every, s.next = map[string]time.Duration{}, map[string]time.Time{}
	}
	if d <= 0 {
		delete(s.every, pattern)
		delete(s.next, pattern)
		return
	}
	if old, ok := s.every[pattern]; ok && old == d {
		return
	}
	s.every[pattern], s.next[pattern] = d, now.Add(d)
}

// Due returns the patterns due at now, sorted, and sets each one's next
// time an interval after now.
func (s *Schedule) Due(now time.Time) []string {
	var out []string
	for p, t := range s.next {
		if !t.After(now) {
			out = append(out, p)
			s.next[p] = now.Add(s.every[p])
		}
	}
	slices.Sort(out)
	return out
}

// Next returns when the first pattern is due; false when none is
// scheduled.
func (s *Schedule) Next() (time.Time, bool) {
	var first time.Time
	for _, t := range s.next {
		if first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}
