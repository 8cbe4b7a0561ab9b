package lua

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi/abitest"
)

// FuzzJSON feeds arbitrary text to ss.json.decode: it never panics, it
// accepts exactly the valid JSON (but too deep nesting and numbers out of
// range), and what it accepts encodes to JSON that means the same to
// encoding/json and decodes and encodes again to the same text.
func FuzzJSON(f *testing.F) {
	for _, seed := range []string{
		`{"a":[1,2,{"b":null}],"c":"x\u00e9\n","d":true,"e":1.5e3,"f":false}`,
		`[]`, `{}`, `[[],{}]`, `null`, `"\ud800"`, `"\u2028<&>"`, `-0`, `1e-400`, `1e400`,
		`{"1":1,"2":2}`, `{"a":1,"a":{}}`, `[1,null,3]`, "\"\xff\"", `[1,]`, `{"a" 1}`, `1 2`, ``,
		strings.Repeat("[", 201) + strings.Repeat("]", 201),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, text string) {
		st := newState(Config{}.withDefaults(), abitest.New(), 64<<20)
		defer st.L.Close()
		L := st.L
		L.SetGlobal("text", glua.LString(text))
		err := L.DoString(`
local ss = require("ssrun")
value, msg = ss.json.decode(text)
if value ~= nil then
  e1 = ss.json.encode(value)
  e2 = ss.json.encode(ss.json.decode(e1))
end`)
		if err != nil {
			var aerr *glua.ApiError
			if errors.As(err, &aerr) && aerr.Type == glua.ApiErrorPanic {
				t.Fatalf("Go panic: %v", err)
			}
			t.Fatalf("%q: %v", text, err)
		}
		msg := L.GetGlobal("msg")
		if L.GetGlobal("value") == glua.LNil {
			if !json.Valid([]byte(text)) {
				return
			}
			if s := msg.String(); !strings.Contains(s, "nested deeper") && !strings.Contains(s, "out of range") {
				t.Fatalf("valid JSON %q refused: %s", text, s)
			}
			return
		}
		if !json.Valid([]byte(text)) {
			t.Fatalf("invalid JSON %q accepted", text)
		}
		e1, e2 := L.GetGlobal("e1").String(), L.GetGlobal("e2").String()
		if e1 != e2 {
			t.Fatalf("%q: encoded %q, then %q", text, e1, e2)
		}
		var want, got any
		if json.Unmarshal([]byte(text), &want) != nil {
			return // deeper than encoding/json goes, or a number it refuses
		}
		if err := json.Unmarshal([]byte(e1), &got); err != nil {
			t.Fatalf("%q encoded as %q, not JSON: %v", text, e1, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q encoded as %q: %v, want %v", text, e1, got, want)
		}
	})
}
