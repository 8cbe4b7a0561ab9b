package lua

import (
	"context"
	"strings"

	glua "github.com/yuin/gopher-lua"
)

// Lua 5.1 patterns (string.find, match, gmatch, gsub), replacing
// gopher-lua's: its matcher backtracks without bound and cannot be
// interrupted (("a?"):rep(20)..("a"):rep(20) against 20 a's runs for
// minutes, past any deadline), and its gsub copies the whole subject once
// per match. This one follows the reference implementation's algorithm
// (lstrlib.c), checks the call's context every patternCheckSteps steps so
// the deadline and memory limit stop it, limits its recursion like Lua 5.2
// ("pattern too complex") and builds gsub's result in one pass, reserving
// it in the rule's memory account. Captures of long subjects returned to
// Lua are copies (state.clone).

const (
	maxCaptures       = 32   // LUA_MAXCAPTURES
	maxMatchDepth     = 200  // MAXCCALLS, Lua 5.2's matchdepth
	patternCheckSteps = 1024 // steps (matcher calls, bytes scanned) between context checks
	capUnfinished     = -1
	capPosition       = -2
	patternSpecials   = "^$*+?.([%-"
)

type capture struct{ init, len int }

// matcher is the state of one match attempt (MatchState).
type matcher struct {
	L       *glua.LState
	st      *state
	ctx     context.Context
	src     string
	pat     string
	level   int
	depth   int
	steps   int
	capture [maxCaptures]capture
}

func (st *state) newMatcher(L *glua.LState, src, pat string) *matcher {
	return &matcher{L: L, st: st, ctx: st.ctx(), src: src, pat: pat}
}

// step counts one unit of work and raises when the call's context is done.
func (m *matcher) step() {
	if m.steps++; m.steps >= patternCheckSteps {
		m.steps = 0
		if err := m.ctx.Err(); err != nil {
			m.L.RaiseError("%v", err)
		}
	}
}

// at returns pattern byte i, or 0 past the end (C's terminator).
func (m *matcher) at(i int) byte {
	if i < len(m.pat) {
		return m.pat[i]
	}
	return 0
}

// classEnd returns the index just past the single-character class at p.
func (m *matcher) classEnd(p int) int {
	c := m.pat[p]
	p++
	switch c {
	case '%':
		if p >= len(m.pat) {
			m.L.RaiseError("%s", "malformed pattern (ends with '%')")
		}
		return p + 1
	case '[':
		if m.at(p) == '^' {
			p++
		}
		for { // look for a ']'
			if p >= len(m.pat) {
				m.L.RaiseError("malformed pattern (missing ']')")
			}
			c := m.pat[p]
			p++
			if c == '%' && p < len(m.pat) {
				p++ // skip escapes (e.g. '%]')
			}
			if m.at(p) == ']' {
				return p + 1
			}
		}
	}
	return p
}

// matchClass reports whether byte c is in class cl (%a, %d, ...).
func matchClass(c, cl byte) bool {
	var res bool
	switch cl | 0x20 { // tolower for letters
	case 'a':
		res = isAlpha(c)
	case 'c':
		res = c < 32 || c == 127
	case 'd':
		res = '0' <= c && c <= '9'
	case 'l':
		res = 'a' <= c && c <= 'z'
	case 'p':
		res = c > 32 && c < 127 && !isAlpha(c) && !('0' <= c && c <= '9')
	case 's':
		res = c == ' ' || '\t' <= c && c <= '\r'
	case 'u':
		res = 'A' <= c && c <= 'Z'
	case 'w':
		res = isAlpha(c) || '0' <= c && c <= '9'
	case 'x':
		res = '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if 'A' <= cl && cl <= 'Z' {
		return !res
	}
	return res
}

func isAlpha(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

// matchBracketClass matches c against the set pat[p] == '[' .. pat[ec] == ']'.
func (m *matcher) matchBracketClass(c byte, p, ec int) bool {
	sig := true
	if m.pat[p+1] == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		switch {
		case m.pat[p] == '%':
			p++
			if matchClass(c, m.pat[p]) {
				return sig
			}
		case m.pat[p+1] == '-' && p+2 < ec:
			p += 2
			if m.pat[p-2] <= c && c <= m.pat[p] {
				return sig
			}
		case m.pat[p] == c:
			return sig
		}
	}
	return !sig
}

// singleMatch matches src[s] against the class pat[p:ep].
func (m *matcher) singleMatch(s, p, ep int) bool {
	if s >= len(m.src) {
		return false
	}
	c := m.src[s]
	switch m.pat[p] {
	case '.':
		return true
	case '%':
		return matchClass(c, m.pat[p+1])
	case '[':
		return m.matchBracketClass(c, p, ep-1)
	}
	return m.pat[p] == c
}

// match matches src[s:] against pat[p:] and returns the end of the match,
// or -1.
func (m *matcher) match(s, p int) int {
	if m.depth++; m.depth > maxMatchDepth {
		m.L.RaiseError("pattern too complex")
	}
	defer func() { m.depth-- }()
	for {
		m.step()
		if p >= len(m.pat) {
			return s
		}
		switch m.pat[p] {
		case '(':
			if m.at(p+1) == ')' {
				return m.startCapture(s, p+2, capPosition)
			}
			return m.startCapture(s, p+1, capUnfinished)
		case ')':
			return m.endCapture(s, p+1)
		case '$':
			if p+1 == len(m.pat) {
				if s == len(m.src) {
					return s
				}
				return -1
			}
		case '%':
			switch next := m.at(p + 1); {
			case next == 'b':
				if s = m.matchBalance(s, p+2); s < 0 {
					return -1
				}
				p += 4
				continue
			case next == 'f':
				p += 2
				if m.at(p) != '[' {
					m.L.RaiseError("%s", "missing '[' after '%f' in pattern")
				}
				ep := m.classEnd(p)
				var prev, cur byte
				if s > 0 {
					prev = m.src[s-1]
				}
				if s < len(m.src) {
					cur = m.src[s]
				}
				if m.matchBracketClass(prev, p, ep-1) || !m.matchBracketClass(cur, p, ep-1) {
					return -1
				}
				p = ep
				continue
			case '0' <= next && next <= '9':
				if s = m.matchCapture(s, next); s < 0 {
					return -1
				}
				p += 2
				continue
			}
		}
		// a single-character class, possibly quantified
		ep := m.classEnd(p)
		ok := m.singleMatch(s, p, ep)
		switch m.at(ep) {
		case '?':
			if ok {
				if res := m.match(s+1, ep+1); res >= 0 {
					return res
				}
			}
			p = ep + 1
			continue
		case '*':
			return m.maxExpand(s, p, ep)
		case '+':
			if !ok {
				return -1
			}
			return m.maxExpand(s+1, p, ep)
		case '-':
			return m.minExpand(s, p, ep)
		}
		if !ok {
			return -1
		}
		s++
		p = ep
	}
}

func (m *matcher) maxExpand(s, p, ep int) int {
	i := 0
	for m.singleMatch(s+i, p, ep) {
		i++
		m.step()
	}
	for ; i >= 0; i-- { // try the longest first
		if res := m.match(s+i, ep+1); res >= 0 {
			return res
		}
	}
	return -1
}

func (m *matcher) minExpand(s, p, ep int) int {
	for {
		if res := m.match(s, ep+1); res >= 0 {
			return res
		}
		if !m.singleMatch(s, p, ep) {
			return -1
		}
		s++
	}
}

func (m *matcher) startCapture(s, p, what int) int {
	if m.level >= maxCaptures {
		m.L.RaiseError("too many captures")
	}
	m.capture[m.level] = capture{init: s, len: what}
	m.level++
	res := m.match(s, p)
	if res < 0 {
		m.level-- // undo the capture
	}
	return res
}

func (m *matcher) endCapture(s, p int) int {
	l := -1
	for i := m.level - 1; i >= 0; i-- {
		if m.capture[i].len == capUnfinished {
			l = i
			break
		}
	}
	if l < 0 {
		m.L.RaiseError("invalid pattern capture")
	}
	m.capture[l].len = s - m.capture[l].init
	res := m.match(s, p)
	if res < 0 {
		m.capture[l].len = capUnfinished
	}
	return res
}

func (m *matcher) matchBalance(s, p int) int {
	if p+1 >= len(m.pat) {
		m.L.RaiseError("unbalanced pattern")
	}
	if s >= len(m.src) || m.src[s] != m.pat[p] {
		return -1
	}
	b, e, cont := m.pat[p], m.pat[p+1], 1
	for i := s + 1; i < len(m.src); i++ {
		m.step()
		switch m.src[i] {
		case e:
			if cont--; cont == 0 {
				return i + 1
			}
		case b:
			cont++
		}
	}
	return -1
}

func (m *matcher) matchCapture(s int, digit byte) int {
	l := int(digit) - '1'
	if l < 0 || l >= m.level || m.capture[l].len == capUnfinished {
		m.L.RaiseError("invalid capture index")
	}
	c := m.capture[l]
	if c.len >= 0 && len(m.src)-s >= c.len && m.src[c.init:c.init+c.len] == m.src[s:s+c.len] {
		return s + c.len
	}
	return -1
}

// luaCapture is captureValue for a value handed to Lua: a string is a copy.
func (m *matcher) luaCapture(i, s, e int) glua.LValue {
	v := m.captureValue(i, s, e)
	if len(m.src) <= cloneAbove {
		return v // as clone would; without boxing the string again
	}
	if c, ok := v.(glua.LString); ok {
		return glua.LString(m.st.clone(m.L, "string capture", m.src, string(c)))
	}
	return v
}

// captureValue returns capture i of the match src[s:e] (the whole match
// when the pattern has no captures and i is 0), a slice of src.
func (m *matcher) captureValue(i, s, e int) glua.LValue {
	if i >= m.level {
		if i != 0 {
			m.L.RaiseError("invalid capture index")
		}
		return glua.LString(m.src[s:e])
	}
	c := m.capture[i]
	switch c.len {
	case capUnfinished:
		m.L.RaiseError("unfinished capture")
	case capPosition:
		return glua.LNumber(c.init + 1)
	}
	return glua.LString(m.src[c.init : c.init+c.len])
}

// pushCaptures pushes the captures of src[s:e] (or the whole match) and
// returns how many.
func (m *matcher) pushCaptures(s, e int, wholeIfNone bool) int {
	n := m.level
	if n == 0 && wholeIfNone {
		n = 1
	}
	for i := range n {
		m.L.Push(m.luaCapture(i, s, e))
	}
	return n
}

// strFind implements string.find (find) and string.match.
func (st *state) strFind(L *glua.LState, find bool) int {
	src, pat := L.CheckString(1), L.CheckString(2)
	init := L.OptInt(3, 1)
	if init < 0 {
		init += len(src) + 1
	}
	init = min(max(init-1, 0), len(src))
	if find && (glua.LVAsBool(L.Get(4)) || !strings.ContainsAny(pat, patternSpecials)) {
		if i := strings.Index(src[init:], pat); i >= 0 {
			L.Push(glua.LNumber(init + i + 1))
			L.Push(glua.LNumber(init + i + len(pat)))
			return 2
		}
		L.Push(glua.LNil)
		return 1
	}
	anchor := strings.HasPrefix(pat, "^")
	if anchor {
		pat = pat[1:]
	}
	m := st.newMatcher(L, src, pat)
	for s := init; ; s++ {
		m.level = 0
		if e := m.match(s, 0); e >= 0 {
			if find {
				L.Push(glua.LNumber(s + 1))
				L.Push(glua.LNumber(e))
				return m.pushCaptures(s, e, false) + 2
			}
			return m.pushCaptures(s, e, true)
		}
		if s >= len(src) || anchor {
			break
		}
	}
	L.Push(glua.LNil)
	return 1
}

// strGmatch implements string.gmatch.
func (st *state) strGmatch(L *glua.LState) int {
	src, pat := L.CheckString(1), L.CheckString(2)
	pos := 0
	L.Push(L.NewFunction(func(L *glua.LState) int {
		m := st.newMatcher(L, src, pat)
		for s := pos; s <= len(src); s++ {
			m.level = 0
			if e := m.match(s, 0); e >= 0 {
				pos = e
				if e == s {
					pos++ // empty match: move on at least one position
				}
				return m.pushCaptures(s, e, true)
			}
		}
		pos = len(src) + 1
		return 0
	}))
	return 1
}

// strGsub implements string.gsub. The result's buffer is reserved in the
// rule's memory account each time it grows, before it does.
func (st *state) strGsub(L *glua.LState) int {
	src, pat := L.CheckString(1), L.CheckString(2)
	repl := L.Get(3)
	switch repl.Type() {
	case glua.LTNumber, glua.LTString, glua.LTTable, glua.LTFunction:
	default:
		L.ArgError(3, "string/function/table expected")
	}
	maxN := L.OptInt(4, len(src)+1)
	anchor := strings.HasPrefix(pat, "^")
	if anchor {
		pat = pat[1:]
	}
	m := st.newMatcher(L, src, pat)
	var b strings.Builder
	add := func(s string) {
		if b.Cap()-b.Len() < len(s) {
			st.reserve(L, "string.gsub", int64(2*b.Cap()+len(s))) // what Grow allocates
			b.Grow(len(s))
		}
		b.WriteString(s)
	}
	s, n := 0, 0
	for n < maxN {
		m.level = 0
		e := m.match(s, 0)
		if e >= 0 {
			n++
			m.replace(repl, s, e, add)
		}
		switch {
		case e > s:
			s = e
		case s < len(src):
			add(src[s : s+1])
			s++
		default:
			s = len(src) + 1
		}
		if s > len(src) || anchor {
			break
		}
	}
	if s < len(src) {
		add(src[s:])
	}
	L.Push(glua.LString(b.String()))
	L.Push(glua.LNumber(n))
	return 2
}

// replace writes what gsub puts in place of the match src[s:e] through add.
func (m *matcher) replace(repl glua.LValue, s, e int, add func(string)) {
	L := m.L
	var v glua.LValue
	switch r := repl.(type) {
	case glua.LString, glua.LNumber:
		text := r.String()
		for {
			i := strings.IndexByte(text, '%')
			if i < 0 || i+1 == len(text) {
				add(text)
				return
			}
			add(text[:i])
			switch d := text[i+1]; {
			case d == '0':
				add(m.src[s:e])
			case '1' <= d && d <= '9':
				add(m.captureValue(int(d-'1'), s, e).String())
			default:
				add(text[i+1 : i+2])
			}
			text = text[i+2:]
		}
	case *glua.LTable:
		v = L.GetTable(r, m.luaCapture(0, s, e))
	case *glua.LFunction:
		L.Push(r)
		L.Call(m.pushCaptures(s, e, true), 1)
		v = L.Get(-1)
		L.Pop(1)
	}
	switch v := v.(type) {
	case glua.LString:
		add(string(v))
	case glua.LNumber:
		add(v.String())
	default:
		if glua.LVAsBool(v) {
			L.RaiseError("invalid replacement value (a %s)", v.Type())
		}
		add(m.src[s:e]) // false or nil: keep the original text
	}
}
