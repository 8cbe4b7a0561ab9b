package lua

import (
	"fmt"
	"strings"
	"unicode/utf8"

	glua "github.com/yuin/gopher-lua"
)

// The string builders: every library function that makes a string reserves
// its size in the rule's memory account before allocating it (see
// account.go), and allocates it once. Their results are gopher-lua's
// (FuzzStringBuilders compares them), except that string.sub and pattern
// captures of long subjects are copies, as in Lua, instead of slices that
// keep their whole subject alive (see clone).

// strRep implements string.rep(s, n).
func (st *state) strRep(L *glua.LState) int {
	s, n := L.CheckString(1), L.CheckInt(2)
	if n <= 0 || s == "" {
		L.Push(glua.LString(""))
		return 1
	}
	st.reserveProduct(L, "string.rep", int64(n), int64(len(s)))
	L.Push(glua.LString(strings.Repeat(s, n)))
	return 1
}

// strSub implements string.sub(s, i [, j]) with gopher-lua's index rules,
// returning a copy.
func (st *state) strSub(L *glua.LState) int {
	s := L.CheckString(1)
	start, end := subIndex(s, L.CheckInt(2), true), subIndex(s, L.OptInt(3, -1), false)
	if start >= len(s) || end < start {
		L.Push(glua.LString(""))
		return 1
	}
	L.Push(glua.LString(st.clone(L, "string.sub", s, s[start:end])))
	return 1
}

// subIndex converts a Lua string index (1-based, negative from the end) to
// a Go one, as gopher-lua's luaIndex2StringIndex does.
func subIndex(s string, i int, start bool) int {
	if start && i != 0 {
		i--
	}
	if i < 0 {
		i = len(s) + i + 1
	}
	i = max(0, i)
	if !start && i > len(s) {
		i = len(s)
	}
	return i
}

// clone returns s, a part of subject, as a string of its own, reserved as
// what: a slice would keep the whole subject alive, and the memory account
// would count overlapping slices once each. Parts of a subject shorter than
// cloneAbove are returned as they are: what they keep alive or are
// counted twice for is not more than what a short string is counted for
// anyway (see shortString).
func (st *state) clone(L *glua.LState, what, subject, s string) string {
	if len(subject) <= cloneAbove || s == "" {
		return s
	}
	st.reserve(L, what, int64(len(s)))
	return strings.Clone(s)
}

// cloneAbove is the length of a subject whose parts clone copies.
const cloneAbove = 2 * shortString

// strReverse implements string.reverse.
func (st *state) strReverse(L *glua.LState) int {
	s := L.CheckString(1)
	st.reserve(L, "string.reverse", int64(len(s)))
	var b strings.Builder
	b.Grow(len(s))
	for i := len(s) - 1; i >= 0; i-- {
		b.WriteByte(s[i])
	}
	L.Push(glua.LString(b.String()))
	return 1
}

// strUpper and strLower implement string.upper and string.lower with
// gopher-lua's strings.ToUpper and ToLower (Unicode case mapping; each byte
// of invalid UTF-8 becomes the 3-byte U+FFFD), reserving the result first:
// its length for ASCII, else what strings.Map may allocate for a result of
// up to 3 bytes per byte of s (doubling as it grows).
func (st *state) strUpper(L *glua.LState) int {
	return st.changeCase(L, "string.upper", strings.ToUpper)
}

func (st *state) strLower(L *glua.LState) int {
	return st.changeCase(L, "string.lower", strings.ToLower)
}

func (st *state) changeCase(L *glua.LState, what string, change func(string) string) int {
	s := L.CheckString(1)
	n := int64(len(s))
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			n = 6*n + utf8.UTFMax
			break
		}
	}
	st.reserve(L, what, n)
	L.Push(glua.LString(change(s)))
	return 1
}

// strFormat implements string.format as gopher-lua does (each directive
// formatted by Go's fmt with the Lua value as its operand) after checking
// the template as Lua 5.1 does (checkFormat). It formats one directive at
// a time, reserving an upper bound of each piece before formatting it, and
// the result before joining the pieces: gopher-lua's one fmt.Sprintf grew
// a buffer by doubling, so ten %s of 60 MiB allocated 4 GB. Unlike
// gopher-lua, extra arguments are ignored (as in Lua) instead of appended
// as "%!(EXTRA ...)".
func (st *state) strFormat(L *glua.LState) int {
	f := L.CheckString(1)
	if err := checkFormat(f); err != nil {
		L.RaiseError("string.format: %v", err)
	}
	var parts []string
	size, arg := int64(0), 2
	for i := 0; i < len(f); {
		j := strings.IndexByte(f[i:], '%')
		if j != 0 {
			if j < 0 {
				j = len(f) - i
			}
			parts = append(parts, f[i:i+j])
			size += int64(j)
			i += j
			continue
		}
		end := directiveEnd(f, i)
		spec := f[i:end]
		i = end
		var piece string
		switch v := L.Get(arg); {
		case spec == "%%":
			piece = "%"
		case arg > L.GetTop():
			piece = "%!" + spec[len(spec)-1:] + "(MISSING)" // as fmt writes it
			arg++
		case plain(spec, v):
			piece = v.String() // no copy of a string
			arg++
		default:
			st.reserve(L, "string.format", formatBound(spec, v))
			piece = fmt.Sprintf(spec, v)
			arg++
		}
		parts = append(parts, piece)
		size += int64(len(piece))
	}
	st.reserve(L, "string.format", size)
	L.Push(glua.LString(strings.Join(parts, "")))
	return 1
}

// plain reports whether directive spec with operand v is "%s" of a string
// or number, which formats as v.String() without copying a string.
func plain(spec string, v glua.LValue) bool {
	if spec != "%s" {
		return false
	}
	switch v.(type) {
	case glua.LString, glua.LNumber:
		return true
	}
	return false
}

// directiveEnd returns the index just past the directive that starts at
// f[i] == '%' in a template checkFormat accepted.
func directiveEnd(f string, i int) int {
	i++
	if f[i] == '%' {
		return i + 1
	}
	for strings.IndexByte("-+ #0", f[i]) >= 0 {
		i++
	}
	for f[i] >= '0' && f[i] <= '9' {
		i++
	}
	if f[i] == '.' {
		i++
		for f[i] >= '0' && f[i] <= '9' {
			i++
		}
	}
	return i + 1
}

// formatBound is an upper bound of the length of fmt.Sprintf(spec, v)
// (v nil: missing), for a spec checkFormat accepted: at most two digits of
// width and of precision, one of Lua's conversions.
func formatBound(spec string, v glua.LValue) int64 {
	const (
		padding  = 99 + 99 // width and precision
		overhead = 64      // fmt's "%!d(type=" wrapping of a bad operand, a sign, an exponent...
		number   = 330     // the longest %f of a float64 (1e308)
	)
	verb := spec[len(spec)-1]
	switch v := v.(type) {
	case nil:
		return overhead
	case glua.LNumber:
		return padding + overhead + number
	case glua.LString:
		switch verb {
		case 'q':
			return padding + overhead + quoteBound(string(v))
		case 'x', 'X':
			return padding + overhead + 3*int64(len(v)) // "% x" separates the bytes
		}
		return padding + overhead + int64(len(v))
	default:
		return padding + overhead + int64(len(v.String()))
	}
}

// quoteBound is an upper bound of the length of s quoted by %q: printable
// ASCII takes one byte (two when escaped), anything else at most four per
// byte (\xff; a 4-byte rune takes at most ten, \U0001f600).
func quoteBound(s string) int64 {
	n := int64(2)
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			n += 2
		case c >= 0x20 && c < 0x7f:
			n++
		default:
			n += 4
		}
	}
	return n
}

// tableConcat implements table.concat, reserving the result (concatSize)
// before gopher-lua's builds it in one allocation.
func (st *state) tableConcat(orig glua.LGFunction) glua.LGFunction {
	return func(L *glua.LState) int {
		st.reserve(L, "table.concat", concatSize(L))
		return orig(L)
	}
}

// concatSize returns an upper bound of the length table.concat would build
// from its arguments, computed as table.concat reads them; it stops at the
// first element table.concat rejects.
func concatSize(L *glua.LState) int64 {
	tbl := L.CheckTable(1)
	sep := int64(len(L.OptString(2, "")))
	n := tbl.Len()
	i, j := max(min(L.OptInt(3, 1), n), 1), min(L.OptInt(4, n), n)
	var size int64
	for k := i; k <= j; k++ {
		switch v := tbl.RawGetInt(k).(type) {
		case glua.LString:
			size += int64(len(v))
		case glua.LNumber:
			size += 24 // "%.14g" is shorter
		default:
			return size
		}
		if k < j {
			size += sep
		}
	}
	return size
}
