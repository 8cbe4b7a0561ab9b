package broker

import (
	"errors"
	"strconv"
	"strings"

	"github.com/ssrun/ssrun/internal/glob"
)

// This file is the ACL file's side of its globs (the matcher is
// internal/glob, shared with the state store's SCAN): principal names,
// state store key patterns (keyType Pattern) and keys with templates
// (keyType String), compiled once when the file loads. With templates
// allowed, `{principal.clientId}` and `{principal.username}` stand for the
// connecting client's id and user name, matched literally (a `*` in a
// client id is a star, not a wildcard).

// tmplVar names a principal value substituted into a pattern.
type tmplVar uint8

const (
	tmplNone tmplVar = iota
	tmplClientID
	tmplUsername
)

// Template tokens (AIO's spelling).
const (
	tokClientID   = "{principal.clientId}"
	tokUsername   = "{principal.username}"
	tokPrincipal  = "{principal."
	tokAttributes = "{principal.attributes."
)

// value is v's value for pr; ok=false when empty, which matches nothing.
func (v tmplVar) value(pr *principal) (string, bool) {
	var s string
	switch v {
	case tmplClientID:
		s = pr.id
	case tmplUsername:
		s = pr.user
	}
	return s, s != ""
}

// parseToken reads a template token at the start of s. n=0 when s does not
// start with "{principal.".
func parseToken(s string) (v tmplVar, n int, err error) {
	switch {
	case !strings.HasPrefix(s, tokPrincipal):
		return tmplNone, 0, nil
	case strings.HasPrefix(s, tokClientID):
		return tmplClientID, len(tokClientID), nil
	case strings.HasPrefix(s, tokUsername):
		return tmplUsername, len(tokUsername), nil
	case strings.HasPrefix(s, tokAttributes):
		return tmplNone, 0, errors.New("{principal.attributes.*} is not supported: ssrun's users have no attributes")
	}
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return tmplNone, 0, errors.New("unterminated template " + quoteShort(s))
	}
	return tmplNone, 0, errors.New("unknown template " + quoteShort(s[:end+1]) + " (want " + tokClientID + " or " + tokUsername + ")")
}

// Value gives pr's value of a template (glob.Vars): its client id or user
// name.
func (pr *principal) Value(v glob.Var) (string, bool) {
	s, ok := tmplVar(v).value(pr)
	return s, ok
}

// parseTemplate is glob.Template for the ACL's tokens.
func parseTemplate(s string) (glob.Var, int, error) {
	v, n, err := parseToken(s)
	return glob.Var(v), n, err
}

// compileGlob compiles an ACL glob; templates says whether {principal.*}
// tokens are allowed (else "{" is an ordinary character).
func compileGlob(src string, templates bool) (glob.Glob, error) {
	if templates {
		return glob.Compile(src, parseTemplate)
	}
	return glob.Compile(src, nil)
}

// exactKey is a keyType String key: the key itself, with templates.
type exactKey struct{ g glob.Glob }

// match reports whether b equals the key (templates substituted).
func (k exactKey) match(b []byte, pr *principal) bool { return k.g.Equal(b, pr) }

// compileExactKey reads a String key: only templates are special.
func compileExactKey(src string) (exactKey, error) {
	g, err := glob.CompileExact(src, parseTemplate)
	return exactKey{g}, err
}

// quoteShort quotes s, cut to a readable length.
func quoteShort(s string) string {
	const maxLen = 40
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return strconv.Quote(s)
}
