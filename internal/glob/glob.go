// Package glob is the one glob of ssrun's keys: the ACL's key patterns
// (keyType Pattern) and principal names, and the state store's SCAN
// patterns, so that a pattern means the same wherever a user writes it.
// A glob is compiled once; matching never allocates and takes at most
// O(len(pattern) * len(subject)) steps, whatever either holds.
//
// Syntax: `*` any run of characters ('/' included), `?` one character,
// `[abc]`, `[a-z]`, `[!a-z]` or `[^a-z]` one character of (or not of) a
// set, `\x` the character x itself. A character is a UTF-8 sequence; a byte
// that is not valid UTF-8 counts as one character. A caller may give
// templates (Compile's tmpl): tokens that stand for a value known only when
// matching (the ACL's `{principal.clientId}`), matched literally.
package glob

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Var names a template's value; 0 is no template.
type Var uint8

// Vars gives the values of templates when matching; a Var without a value
// (ok false, or an empty value) matches nothing.
type Vars interface {
	Value(v Var) (value string, ok bool)
}

// Template reads a template token at the start of s ('{' there): its Var
// and length, n = 0 when s holds none (then '{' is an ordinary character).
type Template func(s string) (v Var, n int, err error)

type kind uint8

const (
	lit   kind = iota // lit, byte for byte
	star              // any run of characters
	one               // one character
	class             // one character in (or not in) ranges
	tmpl              // the value of a template, literally
)

type tok struct {
	kind   kind
	lit    string
	v      Var
	negate bool
	ranges []runeRange
}

type runeRange struct{ lo, hi rune }

// Glob is a compiled pattern.
type Glob struct {
	toks []tok
}

// Compile compiles src; t reads templates (nil: none, '{' is an ordinary
// character).
func Compile(src string, t Template) (Glob, error) {
	var g Glob
	var l []byte
	flush := func() {
		if len(l) > 0 {
			g.toks = append(g.toks, tok{kind: lit, lit: string(l)})
			l = l[:0]
		}
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '*':
			flush()
			if n := len(g.toks); n == 0 || g.toks[n-1].kind != star {
				g.toks = append(g.toks, tok{kind: star})
			}
			i++
		case c == '?':
			flush()
			g.toks = append(g.toks, tok{kind: one})
			i++
		case c == '[':
			flush()
			tk, n, err := parseClass(src[i:])
			if err != nil {
				return Glob{}, err
			}
			g.toks = append(g.toks, tk)
			i += n
		case c == '\\':
			if i+1 >= len(src) {
				return Glob{}, errors.New("pattern ends with an escaping backslash")
			}
			_, n := utf8.DecodeRuneInString(src[i+1:])
			l = append(l, src[i+1:i+1+n]...)
			i += 1 + n
		case c == '{' && t != nil:
			v, n, err := t(src[i:])
			if err != nil {
				return Glob{}, err
			}
			if n == 0 {
				l = append(l, c)
				i++
				continue
			}
			flush()
			g.toks = append(g.toks, tok{kind: tmpl, v: v})
			i += n
		default:
			l = append(l, c)
			i++
		}
	}
	flush()
	return g, nil
}

// CompileExact compiles a key to match exactly: only templates are
// special.
func CompileExact(src string, t Template) (Glob, error) {
	var g Glob
	var l strings.Builder
	for i := 0; i < len(src); {
		if src[i] == '{' && t != nil {
			v, n, err := t(src[i:])
			if err != nil {
				return Glob{}, err
			}
			if n > 0 {
				if l.Len() > 0 {
					g.toks = append(g.toks, tok{kind: lit, lit: l.String()})
					l.Reset()
				}
				g.toks = append(g.toks, tok{kind: tmpl, v: v})
				i += n
				continue
			}
		}
		l.WriteByte(src[i])
		i++
	}
	if l.Len() > 0 {
		g.toks = append(g.toks, tok{kind: lit, lit: l.String()})
	}
	return g, nil
}

// parseClass reads a [...] set at the start of s and returns its length.
func parseClass(s string) (tok, int, error) {
	tk := tok{kind: class}
	i := 1
	if i < len(s) && (s[i] == '!' || s[i] == '^') {
		tk.negate = true
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
			return tok{}, 0, errors.New("unterminated [ in pattern")
		}
		if s[i] == ']' {
			if len(tk.ranges) == 0 {
				return tok{}, 0, errors.New("empty [] in pattern")
			}
			return tk, i + 1, nil
		}
		lo, err := next()
		if err != nil {
			return tok{}, 0, err
		}
		hi := lo
		if i+1 < len(s) && s[i] == '-' && s[i+1] != ']' {
			i++
			if hi, err = next(); err != nil {
				return tok{}, 0, err
			}
			if hi < lo {
				return tok{}, 0, errors.New("range out of order in [] of pattern")
			}
		}
		tk.ranges = append(tk.ranges, runeRange{lo, hi})
	}
}

// Prefix is the literal text every subject that matches starts with (the
// pattern's first token when it is literal): "" when the pattern starts
// with a wildcard or a template.
func (g Glob) Prefix() string {
	if len(g.toks) > 0 && g.toks[0].kind == lit {
		return g.toks[0].lit
	}
	return ""
}

// MatchString is Match for strings.
func (g Glob) MatchString(s string, vars Vars) bool {
	return g.Match([]byte(s), vars)
}

// Match reports whether s matches g, templates taking their values from
// vars (nil: none). It backtracks only to the last star, which is complete
// for globs.
func (g Glob) Match(s []byte, vars Vars) bool {
	toks := g.toks
	ti, si := 0, 0
	starT, starS := -1, 0
	for {
		if ti < len(toks) {
			t := &toks[ti]
			switch t.kind {
			case star:
				starT, starS = ti, si
				ti++
				continue
			case lit:
				if hasPrefix(s[si:], t.lit) {
					si += len(t.lit)
					ti++
					continue
				}
			case tmpl:
				v, ok := value(vars, t.v)
				if !ok {
					return false // an empty value grants nothing
				}
				if hasPrefix(s[si:], v) {
					si += len(v)
					ti++
					continue
				}
			case one:
				if si < len(s) {
					_, n := utf8.DecodeRune(s[si:])
					si += n
					ti++
					continue
				}
			case class:
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

// Equal reports whether b equals an exact key (CompileExact), templates
// substituted from vars.
func (g Glob) Equal(b []byte, vars Vars) bool {
	rest := b
	for _, t := range g.toks {
		part := t.lit
		if t.kind == tmpl {
			v, ok := value(vars, t.v)
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

func value(vars Vars, v Var) (string, bool) {
	if vars == nil {
		return "", false
	}
	s, ok := vars.Value(v)
	return s, ok && s != ""
}

// hasPrefix is bytes.HasPrefix for a string prefix, without converting.
func hasPrefix(b []byte, prefix string) bool {
	return len(b) >= len(prefix) && string(b[:len(prefix)]) == prefix
}

func (t *tok) inClass(r rune) bool {
	in := false
	for _, rg := range t.ranges {
		if rg.lo <= r && r <= rg.hi {
			in = true
			break
		}
	}
	return in != t.negate
}
