package lua

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"

	glua "github.com/yuin/gopher-lua"
)

// ss.json: JSON for rules, whose values often are. Decoding reads tokens
// with encoding/json's Decoder (no recursion: the nesting is ours to
// bound); encoding is written here, because Lua's tables need their own
// array or object decision. Both work under the rule's limits: every
// jsonCheckSteps values they look at the call's context (a deadline is not
// slipped by encoding a huge table), and what they build is reserved in the
// memory account before it is made (account.go).

// MaxJSONDepth is how deeply arrays and objects may nest in what
// ss.json.decode reads and ss.json.encode writes.
const MaxJSONDepth = 200

// jsonCheckSteps is how many values ss.json handles between two looks at
// the call's context.
const jsonCheckSteps = 1024

// Estimated bytes a decoded value adds to the state, as measure.go counts
// them: an array element is a slot; an object member a map entry in
// strdict, one in k2i and a slot in keys (gopher-lua keeps all three), plus
// its key string; an object's first member makes its maps.
const (
	jsonElementBytes = valueBytes
	jsonMemberBytes  = 2*valueBytes + 1 + valueBytes + 9 + valueBytes + boxBytes
	// jsonOutputChunk is ss.json.encode's first output buffer.
	jsonOutputChunk = 4096
)

var jsonMapsBytes = mapSize(true, 0, strdictMin, 2*valueBytes) + mapSize(true, 0, 0, valueBytes+8)

// jsonLib is the ss.json table of one state.
type jsonLib struct {
	st *state
	// null is ss.json.null, what decode makes of JSON null and encode
	// writes as null.
	null *glua.LUserData
	// arrayMT is ss.json.array_mt: decode gives it to the arrays it makes,
	// and encode writes a table that has it as an array, even empty.
	arrayMT *glua.LTable
}

// newJSON returns the ss.json table.
func newJSON(L *glua.LState, st *state) *glua.LTable {
	j := &jsonLib{st: st, null: L.NewUserData(), arrayMT: L.NewTable()}
	nullMT := L.NewTable()
	nullMT.RawSetString("__tostring", L.NewFunction(func(L *glua.LState) int {
		L.Push(glua.LString("null"))
		return 1
	}))
	j.null.Metatable = nullMT
	t := L.NewTable()
	t.RawSetString("encode", L.NewFunction(j.encode))
	t.RawSetString("decode", L.NewFunction(j.decode))
	t.RawSetString("null", j.null)
	t.RawSetString("array_mt", j.arrayMT)
	return t
}

// step counts one value and raises the call's context error every
// jsonCheckSteps values, once the call has ended.
func (j *jsonLib) step(L *glua.LState, steps *int) {
	if *steps++; *steps >= jsonCheckSteps {
		*steps = 0
		if err := j.st.ctx().Err(); err != nil {
			L.RaiseError("%v", err)
		}
	}
}

// decode(text) -> value | nil, message
//
// A syntax error, nesting deeper than MaxJSONDepth, a number out of range
// or text after the value return nil and a message with the byte offset.
// The memory limit and the deadline stop the call, as elsewhere.
func (j *jsonLib) decode(L *glua.LState) int {
	text := argString(L, "json.decode", 1, "text")
	v, err := j.parse(L, text)
	if err != nil {
		L.Push(glua.LNil)
		L.Push(glua.LString("ss.json.decode: " + err.Error()))
		return 2
	}
	L.Push(v)
	return 1
}

// jsonFrame is an array or object being decoded.
type jsonFrame struct {
	t      *glua.LTable
	object bool
	n      int    // elements or members so far
	key    string // object: the member's key, once read
	hasKey bool
}

// parse decodes text into a Lua value. The tables it makes are reachable
// from L's value stack as soon as they are made (the root is pushed, the
// others are in it), so that a measure of the state during the decode
// counts them.
func (j *jsonLib) parse(L *glua.LState, text string) (glua.LValue, error) {
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var (
		stack []jsonFrame
		steps int
	)
	// place puts v where the decoder is: the root, an array's next element
	// or an object's member.
	place := func(v glua.LValue) {
		if len(stack) == 0 {
			if _, ok := v.(*glua.LTable); ok {
				L.Push(v)
			}
			return
		}
		f := &stack[len(stack)-1]
		if f.n++; f.object {
			size := int64(jsonMemberBytes)
			if f.n == 1 {
				size += jsonMapsBytes
			}
			j.st.reserve(L, "ss.json.decode", size)
			f.t.RawSetString(f.key, v)
			f.key, f.hasKey = "", false
		} else {
			j.st.reserve(L, "ss.json.decode", jsonElementBytes)
			f.t.RawSetInt(f.n, v)
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil, jsonSyntax(err, dec, len(text))
		}
		j.step(L, &steps)
		var v glua.LValue
		switch tok := tok.(type) {
		case json.Delim:
			switch tok {
			case '[', '{':
				if len(stack) == MaxJSONDepth {
					return nil, fmt.Errorf("nested deeper than %d at offset %d", MaxJSONDepth, dec.InputOffset()-1)
				}
				j.st.reserve(L, "ss.json.decode", tableBytes)
				f := jsonFrame{t: L.CreateTable(0, 0), object: tok == '{'}
				if !f.object {
					f.t.Metatable = j.arrayMT
				}
				place(f.t)
				stack = append(stack, f)
				continue
			default: // ']' or '}': the decoder checked that it matches
				v = stack[len(stack)-1].t
				stack = stack[:len(stack)-1]
			}
		case string:
			j.st.reserve(L, "ss.json.decode", boxBytes+int64(len(tok)))
			if top := len(stack) - 1; top >= 0 && stack[top].object && !stack[top].hasKey {
				stack[top].key, stack[top].hasKey = tok, true
				continue
			}
			v = glua.LString(tok)
			place(v)
		case json.Number:
			f, err := strconv.ParseFloat(string(tok), 64)
			if err != nil {
				return nil, fmt.Errorf("number %s out of range at offset %d", tok, dec.InputOffset()-int64(len(tok)))
			}
			j.st.reserve(L, "ss.json.decode", numberBytes)
			v = glua.LNumber(f)
			place(v)
		case bool:
			v = glua.LBool(tok)
			place(v)
		case nil:
			v = j.null
			place(v)
		}
		if len(stack) == 0 { // the whole value
			end := dec.InputOffset()
			if _, err := dec.Token(); err != io.EOF {
				return nil, fmt.Errorf("text after the value at offset %d", end)
			}
			return v, nil
		}
	}
}

// jsonSyntax turns a decoder error into one with the offset.
func jsonSyntax(err error, dec *json.Decoder, size int) error {
	var se *json.SyntaxError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%s at offset %d", se.Error(), se.Offset)
	case err == io.EOF, errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("unexpected end of JSON input at offset %d", size)
	}
	return fmt.Errorf("%w at offset %d", err, dec.InputOffset())
}

// encode(value) -> text
//
// Tables whose keys are exactly 1..n (n > 0), or that have ss.json.array_mt
// as metatable, are arrays; other tables are objects with their keys
// sorted. A cycle, nesting deeper than MaxJSONDepth, a function, a
// userdata (but ss.json.null), NaN or an infinity, a string that is not
// UTF-8 or a key that is neither a string nor a number raise a Lua error
// naming the path of the value (e.g. "a.b[3]").
func (j *jsonLib) encode(L *glua.LState) int {
	if L.GetTop() == 0 {
		L.RaiseError("ss.json.encode: bad argument #1 'value' (value expected)")
	}
	e := &jsonEncoder{j: j, L: L, open: map[*glua.LTable]bool{}}
	defer func() { j.st.acct.pending = 0 }()
	e.value(L.Get(1), 0)
	L.Push(glua.LString(unsafe.String(unsafe.SliceData(e.out), len(e.out)))) // out is not written again
	return 1
}

// jsonEncoder writes one value.
type jsonEncoder struct {
	j        *jsonLib
	L        *glua.LState
	out      []byte
	reserved int // the capacity of out, reserved in the memory account
	steps    int
	open     map[*glua.LTable]bool // the tables being written: a cycle comes back to one
	path     []jsonStep            // where the value being written is, for errors
}

// jsonStep is one step of a path: an array index, or an object's key.
type jsonStep struct {
	index int
	key   glua.LValue // nil for an index
}

// fail raises "ss.json.encode: msg at path".
func (e *jsonEncoder) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if len(e.path) > 0 {
		var b strings.Builder
		for _, s := range e.path {
			if s.key == nil {
				fmt.Fprintf(&b, "[%d]", s.index)
			} else {
				b.WriteString(pathElem(s.key))
			}
		}
		msg += " at " + strings.TrimPrefix(b.String(), ".")
	}
	e.L.RaiseError("ss.json.encode: %s", msg)
}

// grow makes room for n more bytes of output. The buffer grows by half
// (append grows a large one by a quarter, allocating four times what it
// ends with), and its capacity is reserved before it is allocated. The output is not in the state until encode returns: it is
// the account's pending bytes, which a measure counts.
func (e *jsonEncoder) grow(n int) {
	need := len(e.out) + n
	if need <= cap(e.out) {
		return
	}
	size := max(need, cap(e.out)+cap(e.out)/2, jsonOutputChunk)
	e.j.st.reserve(e.L, "ss.json.encode", int64(size-e.reserved))
	e.reserved = size
	e.j.st.acct.pending = int64(size)
	out := make([]byte, len(e.out), size)
	copy(out, e.out)
	e.out = out
}

func (e *jsonEncoder) write(s string) {
	e.grow(len(s))
	e.out = append(e.out, s...)
}

func (e *jsonEncoder) value(v glua.LValue, depth int) {
	e.j.step(e.L, &e.steps)
	switch v := v.(type) {
	case *glua.LNilType:
		e.write("null")
	case glua.LBool:
		e.write(strconv.FormatBool(bool(v)))
	case glua.LNumber:
		e.number(float64(v))
	case glua.LString:
		e.string(string(v))
	case *glua.LTable:
		e.table(v, depth+1)
	case *glua.LUserData:
		if v != e.j.null {
			e.fail("cannot encode a userdata")
		}
		e.write("null")
	default:
		e.fail("cannot encode a %s", v.Type())
	}
}

// number writes f: whole numbers below 1e21 in full ("12", not "1.2e+01"),
// others in the shortest form that reads back the same.
func (e *jsonEncoder) number(f float64) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		e.fail("cannot encode %v", f)
	}
	format := byte('g')
	if f == math.Trunc(f) && math.Abs(f) < 1e21 {
		format = 'f'
	}
	e.write(strconv.FormatFloat(f, format, -1, 64))
}

// string writes s quoted, escaping what JSON requires (and U+2028/U+2029,
// which JavaScript does not allow in its strings).
func (e *jsonEncoder) string(s string) {
	if !utf8.ValidString(s) {
		e.fail("cannot encode a string that is not valid UTF-8")
	}
	e.grow(len(s) + 2)
	e.out = append(e.out, '"')
	start := 0
	for i, r := range s {
		var esc string
		switch {
		case r == '"':
			esc = `\"`
		case r == '\\':
			esc = `\\`
		case r == '\n':
			esc = `\n`
		case r == '\r':
			esc = `\r`
		case r == '\t':
			esc = `\t`
		case r < 0x20, r == '\u2028', r == '\u2029':
			esc = fmt.Sprintf(`\u%04x`, r)
		default:
			continue
		}
		e.out = append(e.out, s[start:i]...)
		e.write(esc)
		start = i + utf8.RuneLen(r)
	}
	e.out = append(e.out, s[start:]...)
	e.out = append(e.out, '"')
}

// jsonMember is an object member: its JSON key and its Lua key.
type jsonMember struct {
	name string
	key  glua.LValue
}

func (e *jsonEncoder) table(t *glua.LTable, depth int) {
	if depth > MaxJSONDepth {
		e.fail("nested deeper than %d", MaxJSONDepth)
	}
	if e.open[t] {
		e.fail("cycle (a table contains itself)")
	}
	e.open[t] = true
	defer delete(e.open, t)

	count, maxIndex := 0, 0
	indices := true
	t.ForEach(func(k, _ glua.LValue) {
		count++
		if i, ok := arrayIndex(k); ok {
			maxIndex = max(maxIndex, i)
		} else {
			indices = false
		}
	})
	switch {
	case t.Metatable == e.j.arrayMT:
		if !indices {
			e.fail("a table with ss.json.array_mt has a key that is not an array index")
		}
		e.array(t, maxIndex, depth) // holes are null
	case count > 0 && indices && maxIndex == count:
		e.array(t, count, depth)
	default:
		e.object(t, count, depth)
	}
}

// arrayIndex reports whether k is a whole number >= 1 (and <= 2^53: beyond,
// doubles skip integers).
func arrayIndex(k glua.LValue) (int, bool) {
	n, ok := k.(glua.LNumber)
	if !ok {
		return 0, false
	}
	f := float64(n)
	if f < 1 || f > 1<<53 || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

func (e *jsonEncoder) array(t *glua.LTable, n, depth int) {
	e.write("[")
	for i := 1; i <= n; i++ {
		if i > 1 {
			e.write(",")
		}
		e.path = append(e.path, jsonStep{index: i})
		e.value(t.RawGetInt(i), depth)
		e.path = e.path[:len(e.path)-1]
	}
	e.write("]")
}

func (e *jsonEncoder) object(t *glua.LTable, count, depth int) {
	e.j.st.reserve(e.L, "ss.json.encode", int64(count)*(valueBytes+16)) // members, below
	members := make([]jsonMember, 0, count)
	t.ForEach(func(k, _ glua.LValue) {
		switch k := k.(type) {
		case glua.LString:
			members = append(members, jsonMember{string(k), k})
		case glua.LNumber:
			members = append(members, jsonMember{k.String(), k})
		default:
			e.fail("cannot encode a key of type %s", k.Type())
		}
	})
	slices.SortFunc(members, func(a, b jsonMember) int {
		e.j.step(e.L, &e.steps) // sorting a million keys takes a while
		return strings.Compare(a.name, b.name)
	})
	e.write("{")
	for i, m := range members {
		if i > 0 {
			if m.name == members[i-1].name {
				e.fail("keys %s and %s are both %q", jsonKey(members[i-1].key), jsonKey(m.key), m.name)
			}
			e.write(",")
		}
		e.path = append(e.path, jsonStep{key: m.key})
		e.string(m.name)
		e.write(":")
		e.value(t.RawGet(m.key), depth)
		e.path = e.path[:len(e.path)-1]
	}
	e.write("}")
}

// pathElem is how key k appears in a path: .name for a name Lua could
// write so, else [key].
func pathElem(k glua.LValue) string {
	if s, ok := k.(glua.LString); ok && isName(string(s)) {
		return "." + string(s)
	}
	return "[" + jsonKey(k) + "]"
}

// jsonKey shows key k as Lua source would: a number, or a quoted string.
func jsonKey(k glua.LValue) string {
	if s, ok := k.(glua.LString); ok {
		if len(s) > 40 {
			return strconv.Quote(string(s[:40])) + "..."
		}
		return strconv.Quote(string(s))
	}
	return k.String()
}

// isName reports whether s is a Lua name (not checking keywords: the path
// is for people).
func isName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '_' && (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (i == 0 || c < '0' || c > '9') {
			return false
		}
	}
	return true
}
