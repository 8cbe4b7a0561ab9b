package lua

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

func TestJSONEncode(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		{`{1, 2, 3}`, `[1,2,3]`},
		{`{}`, `{}`},
		{`setmetatable({}, ss.json.array_mt)`, `[]`},
		{`setmetatable({[1] = 1, [3] = 3}, ss.json.array_mt)`, `[1,null,3]`},
		{`{a = 1, b = {true, false}, c = ss.json.null, d = {}}`, `{"a":1,"b":[true,false],"c":null,"d":{}}`},
		{`{[1] = "x", [3] = "y"}`, `{"1":"x","3":"y"}`},
		{`{1, 2, x = 3}`, `{"1":1,"2":2,"x":3}`},
		{`{[1.5] = 1, [-1] = 2, [0] = 3}`, `{"-1":2,"0":3,"1.5":1}`},
		{`{b = 1, a = 2, [10] = 3, [9] = 4}`, `{"10":3,"9":4,"a":2,"b":1}`},
		{`{0, 1.5, 1e21, 2^53, 1e-7, 123456789012, -42, 0.1}`, `[0,1.5,1e+21,9007199254740992,1e-07,123456789012,-42,0.1]`},
		{`"a\"b\\c\n\r\t\1\127\195\169\226\128\168/<>&"`, "\"a\\\"b\\\\c\\n\\r\\t\\u0001\x7fé\\u2028/<>&\""},
		{`""`, `""`},
		{`nil`, `null`},
		{`ss.json.null`, `null`},
		{`{ss.json.null, ss.json.null}`, `[null,null]`},
		{`true`, `true`},
		{`5`, `5`},
		{`{["a b"] = {[""] = {}}}`, `{"a b":{"":{}}}`},
		{`(function() local s = {1} return {s, s, {s}} end)()`, `[[1],[1],[[1]]]`}, // shared, not a cycle
	} {
		h := abitest.New()
		if got, want := evalRule(t, h, `ss.json.encode(`+tc.expr+`)`), "string:"+tc.want; got != want {
			t.Errorf("encode(%s)\n got %q\nwant %q", tc.expr, got, want)
		}
		if !json.Valid([]byte(tc.want)) {
			t.Errorf("%s: want %s is not JSON", tc.expr, tc.want)
		}
	}
}

// nested returns a Lua expression making n nested tables: {{...{}...}}.
func nested(n int) string {
	return `(function() local t = {} for i = 2, ` + itoa(n) + ` do t = {t} end return t end)()`
}

func itoa(n int) string { return glua.LNumber(n).String() }

func TestJSONEncodeErrors(t *testing.T) {
	for _, tc := range []struct{ expr, msg string }{
		{`{a = {b = {1, 2, print}}}`, "ss.json.encode: cannot encode a function at a.b[3]"},
		{`(function() local t = {a = {}} t.a.b = t return t end)()`, "ss.json.encode: cycle (a table contains itself) at a.b"},
		{`(function() local t = {} t[1] = {x = {t}} return t end)()`, "ss.json.encode: cycle (a table contains itself) at [1].x[1]"},
		{`{v = 0/0}`, "ss.json.encode: cannot encode NaN at v"},
		{`{1/0}`, "ss.json.encode: cannot encode +Inf at [1]"},
		{`{["k-1"] = {-1/0}}`, `ss.json.encode: cannot encode -Inf at ["k-1"][1]`},
		{`{s = {"ok", "\255"}}`, "ss.json.encode: cannot encode a string that is not valid UTF-8 at s[2]"},
		{`{[true] = 1}`, "ss.json.encode: cannot encode a key of type boolean"},
		{`{x = {[{}] = 1}}`, "ss.json.encode: cannot encode a key of type table at x"},
		{`setmetatable({1, x = 1}, ss.json.array_mt)`, "ss.json.encode: a table with ss.json.array_mt has a key that is not an array index"},
		{`{[string.rep("k ", 50)] = {print}}`, `ss.json.encode: cannot encode a function at ["` + strings.Repeat("k ", 20) + `"...][1]`},
		{nested(MaxJSONDepth + 1), "ss.json.encode: nested deeper than 200 at " + strings.Repeat("[1]", MaxJSONDepth)},
	} {
		h := abitest.New()
		got := evalRule(t, h, `pcall(ss.json.encode, `+tc.expr+`)`)
		if want := "boolean:false | string:"; !strings.HasPrefix(got, want) || !strings.HasSuffix(got, tc.msg) {
			t.Errorf("encode(%s): %q, want a raised error %q", tc.expr, got, tc.msg)
		}
	}
	if got := evalRule(t, abitest.New(), `pcall(ss.json.encode)`); !strings.HasSuffix(got, "ss.json.encode: bad argument #1 'value' (value expected)") {
		t.Errorf("encode(): %q", got)
	}
	// Keys that encode alike: the order of the two depends on the table.
	if got := evalRule(t, abitest.New(), `pcall(ss.json.encode, {[1] = "a", ["1"] = "b"})`); !strings.Contains(got, `are both "1"`) {
		t.Errorf("duplicate keys: %q", got)
	}
	if got, want := evalRule(t, abitest.New(), `#ss.json.encode(`+nested(MaxJSONDepth)+`)`), "number:400"; got != want {
		t.Errorf("%d levels: %q, want %q", MaxJSONDepth, got, want)
	}
}

// TestJSONEncodeUserdata checks a userdata other than ss.json.null (a rule
// cannot make one; a host library could hand one over).
func TestJSONEncodeUserdata(t *testing.T) {
	st := newState(Config{}.withDefaults(), abitest.New(), 1<<20)
	defer st.L.Close()
	st.L.SetGlobal("u", st.L.NewUserData())
	err := st.L.DoString(`ss = require("ssrun") ss.json.encode({list = {u}})`)
	if err == nil || !strings.Contains(err.Error(), "ss.json.encode: cannot encode a userdata at list[1]") {
		t.Errorf("encode of a userdata: %v", err)
	}
}

func TestJSONDecode(t *testing.T) {
	for _, tc := range []struct{ expr, want string }{
		// decoded values, shown re-encoded
		{`ss.json.encode(ss.json.decode('{"a":[1,2,{"b":null}],"c":"x\\u00e9\\n","d":true,"e":1.5e3,"f":false}'))`, `string:{"a":[1,2,{"b":null}],"c":"xé\n","d":true,"e":1500,"f":false}`},
		{`ss.json.encode(ss.json.decode(" [ ] ")), ss.json.encode(ss.json.decode("{}"))`, `string:[] | string:{}`},
		{`ss.json.decode("null") == ss.json.null, tostring(ss.json.null)`, `boolean:true | string:null`},
		{`#ss.json.decode("[1,null,3]"), ss.json.decode("[1,null,3]")[2] == ss.json.null`, `number:3 | boolean:true`},
		{`getmetatable(ss.json.decode("[1]")) == ss.json.array_mt, getmetatable(ss.json.decode("{}"))`, `boolean:true | nil:nil`},
		{`ss.json.decode("12345678901"), ss.json.decode("-0.5"), ss.json.decode("1E2")`, `number:12345678901 | number:-0.5 | number:100`},
		{`ss.json.decode(' "x\\"\\u0000" ')`, "string:x\"\x00"},
		{`ss.json.decode('{"a":1,"a":2}').a`, `number:2`},
		{`ss.json.decode('{"k":{"k":["v"]}}').k.k[1]`, `string:v`},
		{`ss.json.decode(5)`, `number:5`},
		// bad text: nil and a message with the offset
		{`ss.json.decode("")`, `nil:nil | string:ss.json.decode: unexpected end of JSON input at offset 0`},
		{`ss.json.decode("[1,2")`, `nil:nil | string:ss.json.decode: unexpected end of JSON input at offset 4`},
		{`ss.json.decode('{"a":}')`, `nil:nil | string:ss.json.decode: invalid character '}' looking for beginning of value at offset 5`},
		{`ss.json.decode('{"a" 1}')`, `nil:nil | string:ss.json.decode: invalid character '1' after object key at offset 5`},
		{`ss.json.decode("[1] x")`, `nil:nil | string:ss.json.decode: text after the value at offset 3`},
		{`ss.json.decode("1 2")`, `nil:nil | string:ss.json.decode: text after the value at offset 1`},
		{`ss.json.decode("[1e400]")`, `nil:nil | string:ss.json.decode: number 1e400 out of range at offset 1`},
		{`ss.json.decode("nul")`, `nil:nil | string:ss.json.decode: unexpected end of JSON input at offset 3`},
		{`ss.json.decode("[1,]")`, `nil:nil | string:ss.json.decode: invalid character ']' looking for beginning of value at offset 3`},
		{`ss.json.decode(string.rep("[", 200) .. string.rep("]", 200)) ~= nil`, `boolean:true`},
		{`ss.json.decode(string.rep("[", 201) .. string.rep("]", 201))`, `nil:nil | string:ss.json.decode: nested deeper than 200 at offset 200`},
		{`ss.json.decode('{"a":' .. string.rep("[", 1e6))`, `nil:nil | string:ss.json.decode: nested deeper than 200 at offset 204`},
	} {
		if got := evalRule(t, abitest.New(), tc.expr); got != tc.want {
			t.Errorf("%s\n got %q\nwant %q", tc.expr, got, tc.want)
		}
	}
	got := evalRule(t, abitest.New(), `pcall(ss.json.decode, {})`)
	if want := "ss.json.decode: bad argument #1 'text' (string expected, got table)"; !strings.HasSuffix(got, want) {
		t.Errorf("decode({}): %q, want %q", got, want)
	}
}

// TestJSONDecodeMemory is the allocation attack: 3 bytes of text ("[],")
// make a table of about a hundred bytes, so 2 MiB of text would build
// about 80 MiB of tables. Decode reserves what it builds, so the rule is
// stopped at its limit with ErrMemory, having allocated a fraction of it.
func TestJSONDecodeMemory(t *testing.T) {
	const (
		limit = 16 << 20
		size  = 2 << 20
	)
	h := abitest.New()
	s := startRule(t, `
local ss = require("ssrun")
function on_event(ev)
  kept = ss.json.decode(text)
end`, h, abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
	text := "[" + strings.Repeat("[],", size/3) + "[]]"
	s.(*script).st.L.SetGlobal("text", glua.LString(text))
	grew, err := handleAllocating(t, s)
	wantErr(t, err, abi.ErrMemory, 4)
	if bound := uint64(4 * limit); grew > bound {
		t.Errorf("the call allocated %d MiB, more than 4 x the limit (%d MiB)", grew>>20, bound>>20)
	}
}

// hugeRule returns a started rule whose global big is a table holding
// about 40 MB of JSON, shared subtables (1000 references to one array of
// 1000 strings of 40 bytes), so that building it is cheap.
func hugeRule(t *testing.T, src string, lim abi.Limits) (abi.Script, int) {
	s := startRule(t, src, abitest.New(), lim)
	L := s.(*script).st.L
	inner := L.CreateTable(1000, 0)
	for i := range 1000 {
		inner.RawSetInt(i+1, glua.LString(strings.Repeat("x", 39)+string(rune('a'+i%26))))
	}
	outer := L.CreateTable(1000, 0)
	for i := range 1000 {
		outer.RawSetInt(i+1, inner)
	}
	L.SetGlobal("big", outer)
	return s, 1000 * 1000 * 43
}

// TestJSONHonoursDeadline checks that a rule cannot slip its deadline in
// one ss.json call: encoding 40 MB of JSON, or decoding it, stops at the
// deadline (a timeout) having done a fraction of the work. Without the
// checks the call ran to its end, building the whole text, and was only
// then reported as a timeout.
func TestJSONHonoursDeadline(t *testing.T) {
	lim := abi.Limits{MemoryBytes: 1 << 30, CallTimeout: 10 * time.Millisecond}
	t.Run("encode", func(t *testing.T) {
		s, size := hugeRule(t, `
local ss = require("ssrun")
function on_event(ev)
  text = ss.json.encode(big)
end`, lim)
		grew, err := handleAllocating(t, s)
		wantErr(t, err, abi.ErrTimeout, 4)
		if grew > uint64(size/2) {
			t.Errorf("the call allocated %d MiB, more than half the text (%d MiB): it ran past its deadline", grew>>20, size>>21)
		}
	})
	t.Run("decode", func(t *testing.T) {
		s, size := hugeRule(t, `
local ss = require("ssrun")
function on_event(ev)
  kept = ss.json.decode(text)
end`, lim)
		L := s.(*script).st.L
		text := `[` + strings.Repeat(`"`+strings.Repeat("y", 40)+`",`, size/43) + `1]`
		L.SetGlobal("text", glua.LString(text))
		grew, err := handleAllocating(t, s)
		wantErr(t, err, abi.ErrTimeout, 4)
		if grew > uint64(size/2) {
			t.Errorf("the call allocated %d MiB, more than half the text (%d MiB): it ran past its deadline", grew>>20, size>>21)
		}
	})
}

// TestJSONEncodeMemory checks that encode's output, which is not in the
// state until encode returns, counts against the limit while it is built:
// 43 MB of JSON under a 16 MiB limit fails with ErrMemory, having allocated
// a bounded multiple of the limit.
func TestJSONEncodeMemory(t *testing.T) {
	const limit = 16 << 20
	s, _ := hugeRule(t, `
local ss = require("ssrun")
function on_event(ev)
  text = ss.json.encode(big)
end`, abi.Limits{MemoryBytes: limit, CallTimeout: time.Minute})
	grew, err := handleAllocating(t, s)
	wantErr(t, err, abi.ErrMemory, 4)
	if bound := uint64(4 * limit); grew > bound {
		t.Errorf("the call allocated %d MiB, more than 4 x the limit (%d MiB)", grew>>20, bound>>20)
	}
}

// handleAllocating handles one event and returns how many bytes the
// process allocated meanwhile, and its error.
func handleAllocating(t *testing.T, s abi.Script) (uint64, error) {
	t.Helper()
	before := allocated()
	err := s.Handle(context.Background(), setEvent("k", "v"))
	grew := allocated() - before
	t.Logf("%v; the process allocated %d MiB during the call", err, grew>>20)
	return grew, err
}
