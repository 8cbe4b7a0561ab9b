package broker

import (
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// This file is the glob matcher of the ACL file: principal names, state
// store key patterns (keyType Pattern) and keys with templates (keyType
// String). A glob is compiled once when the file loads; matching never
// allocates and takes at most O(len(pattern) * len(subject)) steps, whatever
// either holds.
//
// Syntax: `*` any run of characters ('/' included), `?` one character,
// `[abc]`, `[a-z]`, `[!a-z]` or `[^a-z]` one character of (or not of) a set,
// `\x` the character x itself. A character is a UTF-8 sequence; a byte that
// is not valid UTF-8 counts as one character. With templates allowed,
// `{principal.clientId}` and `{principal.username}` stand for the
// connecting client's id and user name, matched literally (a `*` in a client
// id is a star, not a wildcard).

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

type globKind uint8

const (
	globLit   globKind = iota // lit, byte for byte
	globStar                  // any run of characters
	globOne                   // one character
	globClass                 // one character in (or not in) ranges
	globTmpl                  // the principal's value of tmpl, literally
)

type globTok struct {
	kind   globKind
	lit    string
	tmpl   tmplVar
	negate bool
	ranges []runeRange
}

type runeRange struct{ lo, hi rune }

// glob is a compiled pattern.
type glob struct {
	toks []globTok
}

// compileGlob compiles src; templates says whether {principal.*} tokens are
// allowed (else "{" is an ordinary character).
func compileGlob(src string, templates bool) (glob, error) {
	var g glob
	var lit []byte
	flush := func() {
		if len(lit) > 0 {
			g.toks = append(g.toks, globTok{kind: globLit, lit: string(lit)})
			lit = lit[:0]
		}
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '*':
			flush()
			if n := len(g.toks); n == 0 || g.toks[n-1].kind != globStar {
				g.toks = append(g.toks, globTok{kind: globStar})
			}
			i++
		case c == '?':
			flush()
			g.toks = append(g.toks, globTok{kind: globOne})
			i++
		case c == '[':
			flush()
			tok, n, err := parseClass(src[i:])
			if err != nil {
				return glob{}, err
			}
			g.toks = append(g.toks, tok)
			i += n
		case c == '\\':
			if i+1 >= len(src) {
				return glob{}, errors.New("pattern ends with an escaping backslash")
			}
			_, n := utf8.DecodeRuneInString(src[i+1:])
			lit = append(lit, src[i+1:i+1+n]...)
			i += 1 + n
		case c == '{' && templates:
			v, n, err := parseToken(src[i:])
			if err != nil {
				return glob{}, err
			}
			if n == 0 {
				lit = append(lit, c)
				i++
				continue
			}
			flush()
			g.toks = append(g.toks, globTok{kind: globTmpl, tmpl: v})
			i += n
		default:
			lit = append(lit, c)
			i++
		}
	}
	flush()
	return g, nil
}

// parseClass reads a [...] set at the start of s and returns its length.
func parseClass(s string) (globTok, int, error) {
	tok := globTok{kind: globClass}
	i := 1
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		tok.negate = true
		i++
	}
	next := func() (rune, error) {
		if i < len(s) && s[i] == '\\' {
			i++
		}
		if i >= len(s) {
			return 0, errors.New("unterminated [ in pattern")
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		return r, nil
	}
	for {
		if i >= len(s) {
			return globTok{}, 0, errors.New("unterminated [ in pattern")
		}
		if s[i] == ']' {
			if len(tok.ranges) == 0 {
				return globTok{}, 0, errors.New("empty [] in pattern")
			}
			return tok, i + 1, nil
		}
		lo, err := next()
		if err != nil {
			return globTok{}, 0, err
		}
		hi := lo
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			i++
			if hi, err = next(); err != nil {
				return globTok{}, 0, err
			}
			if hi < lo {
				return globTok{}, 0, errors.New("range out of order in [] of pattern")
			}
		}
		tok.ranges = append(tok.ranges, runeRange{lo, hi})
	}
}

// matchString is match for strings (principal names).
func (g glob) matchString(s string, pr *principal) bool {
	return g.match([]byte(s), pr)
}

// match reports whether s matches g for principal pr (templates only). It
// backtracks only to the last star, which is complete for globs.
func (g glob) match(s []byte, pr *principal) bool {
	toks := g.toks
	ti, si := 0, 0
	starT, starS := -1, 0
	for {
		if ti < len(toks) {
			t := &toks[ti]
			switch t.kind {
			case globStar:
				starT, starS = ti, si
				ti++
				continue
			case globLit:
				if hasPrefix(s[si:], t.lit) {
					si += len(t.lit)
					ti++
					continue
				}
			case globTmpl:
				v, ok := t.tmpl.value(pr)
				if !ok {
					return false // an empty value grants nothing
				}
				if hasPrefix(s[si:], v) {
					si += len(v)
					ti++
					continue
				}
			case globOne:
				if si < len(s) {
					_, n := utf8.DecodeRune(s[si:])
					si += n
					ti++
					continue
				}
			case globClass:
				if si < len(s) {
					r, n := utf8.DecodeRune(s[si:])
					if t.inClass(r) {
						si += n
						ti++
						continue
					}
				}
			}
		} else if si == len(s) {
			return true
		}
		if starT < 0 || starS >= len(s) {
			return false
		}
		_, n := utf8.DecodeRune(s[starS:])
		starS += n
		ti, si = starT+1, starS
	}
}

// hasPrefix is bytes.HasPrefix for a string prefix, without converting.
func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

func (t *globTok) inClass(r rune) bool {
	in := false
	for _, rg := range t.ranges {
		if rg.lo <= r && r <= rg.hi {
			in = true
			break
		}
	}
	return in != t.negate
}

// exactKey is a keyType String key: the key itself, with templates.
type exactKey struct{ g glob }

// match reports whether b equals the key (templates substituted).
func (k exactKey) match(b []byte, pr *principal) bool {
	rest := b
	for _, t := range k.g.toks {
		var part string
		switch t.kind {
		case globLit:
			part = t.lit
		case globTmpl:
			v, ok := t.tmpl.value(pr)
			if !ok {
				return false
			}
			part = v
		}
		if !hasPrefix(rest, part) {
			return false
		}
		rest = rest[len(part):]
	}
	return len(rest) == 0
}

// compileExactKey reads a String key: only templates are special.
func compileExactKey(src string) (exactKey, error) {
	var g glob
	var lit strings.Builder
	for i := 0; i < len(src); {
		if src[i] == '{' {
			v, n, err := parseToken(src[i:])
			if err != nil {
				return exactKey{}, err
			}
			if n > 0 {
				if lit.Len() > 0 {
					g.toks = append(g.toks, globTok{kind: globLit, lit: lit.String()})
					lit.Reset()
				}
				g.toks = append(g.toks, globTok{kind: globTmpl, tmpl: v})
				i += n
				continue
			}
		}
		lit.WriteByte(src[i])
		i++
	}
	if lit.Len() > 0 {
		g.toks = append(g.toks, globTok{kind: globLit, lit: lit.String()})
	}
	return exactKey{g}, nil
}

// quoteShort quotes s, cut to a readable length.
func quoteShort(s string) string {
	const maxLen = 40
	if len(s) > maxLen {
		return strconv.Quote(s[:maxLen]) + "..."
	}
	return strconv.Quote(s)
}
