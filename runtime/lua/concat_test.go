package lua

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
)

// TestConcatSemantics: the rewritten .. keeps gopher-lua's results, order of
// evaluation and of metamethods, and errors.
func TestConcatSemantics(t *testing.T) {
	for _, code := range []string{
		`assert("a" .. "b" .. "c" == "abc")`,
		`assert(1 .. 2 == "12" and 1.5 .. "" == "1.5" and -0.0 .. "" == "0" and 2^63 .. "" == "9.223372036854776e+18")`,
		`local function f() return "x", "y" end assert("a" .. f() == "ax" and f() .. "b" == "xb")`,
		`local function f(...) return "a" .. ... end assert(f("b", "c") == "ab")`,
		`local function f(...) return ... .. "z" end assert(f("b", "c") == "bz")`,
		`local t = {} assert(("p"):rep(2) .. t.x == nil)`, // raises, checked below
		`local log = {}
		 local mt = {__concat = function(a, b)
		   log[#log + 1] = (type(a) == "table" and a.n or a) .. "+" .. (type(b) == "table" and b.n or b)
		   return "m"
		 end}
		 local x, y = setmetatable({n = "X"}, mt), setmetatable({n = "Y"}, mt)
		 local r = "a" .. x .. "b" .. "c" .. y .. 1
		 assert(r == "am", r)
		 assert(table.concat(log, ",") == "Y+1,X+bcm", table.concat(log, ","))`,
		`local order = {}
		 local function v(s) order[#order + 1] = s return s end
		 local r = v("a") .. (v("b") .. v("c")) .. v("d")
		 assert(r == "abcd" and table.concat(order) == "abcd")`,
		`local r = ("x"):upper() .. #"abc" .. ({1})[1]
		 assert(r == "X31")`,
		`local s = "" for i = 1, 100 do s = s .. i end assert(#s == 192)`,
	} {
		h := abitest.New()
		_, err := compileRule(t, New(Config{}), "concat.lua", code+"\nfunction on_event() end").Start(context.Background(), h, abi.Limits{})
		if strings.Contains(code, "t.x == nil") {
			if e := wantErr(t, err, abi.ErrCrashed, 1); e.Msg != "cannot perform concat operation between string and nil" {
				t.Errorf("%s: %q", code, e.Msg)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", code, err)
		}
	}
}

// TestConcatErrorLines: an error in a chain spread over lines names the
// chain's first line, as OP_CONCAT did.
func TestConcatErrorLines(t *testing.T) {
	for _, src := range []string{
		"local a\nlocal s = 'x' ..\n  a\n  .. 'y'",
		"local a\nlocal s = ('x' ..\n  {}) .. 'y'",
		"local a\nreturn 'x' ..\n  a",
	} {
		orig, ours := runBoth(t, src)
		if orig.err != ours.err || orig.line != ours.line {
			t.Errorf("%q: gopher-lua %v at line %d, rewritten %v at line %d", src, orig.err, orig.line, ours.err, ours.line)
		}
	}
}

// outcome is what running a chunk did.
type outcome struct {
	err     string // the error message, "" if none
	line    int
	sent    error // the sentinel of the error
	globals string
	logs    string
}

// runChunk runs proto (the rewritten wrapper, or gopher-lua's own chunk)
// in a fresh sandbox under short limits.
func runChunk(proto *glua.FunctionProto, rewritten bool) outcome {
	h := abitest.New()
	s := &script{
		prog: &program{opts: Config{RegistrySize: 256, RegistryMaxSize: 4096}.withDefaults(), name: "fuzz.lua", proto: proto},
		host: h,
		lim:  abi.Limits{CallTimeout: 20 * time.Millisecond, MemoryBytes: 16 << 20},
	}
	st := newState(s.prog.opts, h, s.lim.MemoryBytes)
	defer st.L.Close()
	fn := st.L.NewFunctionFromProto(proto)
	if rewritten {
		fn = st.mainFunction(proto)
	}
	var o outcome
	if err := s.call(context.Background(), st, callLoad, fn); err != nil {
		var e *Error
		errors.As(err, &e)
		o.err, o.line, o.sent = e.Msg, e.Line, e.Err
	}
	o.globals = digest(st.L.G.Global)
	var logs []string
	for _, l := range h.Logs() {
		logs = append(logs, l.Msg)
	}
	o.logs = strings.Join(logs, "\n")
	return o
}

// digest shows t's string-keyed entries, sorted: scalars by value, other
// values by type (their addresses differ between runs).
func digest(t *glua.LTable) string {
	var out []string
	t.ForEach(func(k, v glua.LValue) {
		if k.Type() != glua.LTString {
			return
		}
		switch v.Type() {
		case glua.LTString, glua.LTNumber, glua.LTBool:
			out = append(out, fmt.Sprintf("%s=%s:%q", k, v.Type(), v.String()))
		default:
			out = append(out, fmt.Sprintf("%s=%s", k, v.Type()))
		}
	})
	slices.Sort(out)
	return strings.Join(out, " ")
}

// indexesConstant reports whether chunk indexes a constant, ("x").k:
// gopher-lua compiles the constant into an RK operand and then uses its
// index as a register number, so ("").k = f() reads whichever register
// that is (local t = {} ("").k = "a" .. "b" sets t.k in gopher-lua
// itself). What happens then depends on register allocation, which the
// rewrite changes; such chunks are not compared.
func indexesConstant(chunk []ast.Stmt) bool {
	found := false
	mapStmts(chunk, func(e ast.Expr) ast.Expr {
		if a, ok := e.(*ast.AttrGetExpr); ok {
			if _, ok := a.Object.(ast.ConstExpr); ok {
				found = true
			}
		}
		return e
	})
	return found
}

// runBoth compiles src as gopher-lua does and as Compile does (with the
// rewrite), and runs both; it skips when either does not compile.
func runBoth(t *testing.T, src string) (orig, ours outcome) {
	t.Helper()
	chunk, err := parse.Parse(strings.NewReader(src), "fuzz.lua")
	if err != nil {
		t.Skip("does not parse")
	}
	if indexesConstant(chunk) {
		t.Skip("indexes a constant")
	}
	plain, perr := glua.Compile(chunk, "fuzz.lua")
	wrapper, werr := compile("fuzz.lua", []byte(src))
	switch {
	case perr != nil && werr == nil:
		t.Fatalf("gopher-lua refuses (%v) what the rewrite compiles", perr)
	case perr == nil && werr != nil:
		if strings.Contains(werr.Error(), "register overflow") { // the call takes one more register than OP_CONCAT
			t.Skip(werr)
		}
		t.Fatalf("the rewrite refuses (%v) what gopher-lua compiles", werr)
	case perr != nil:
		t.Skip("does not compile")
	}
	// The rewritten chunk first: gopher-lua's own OP_CONCAT is what the
	// rewrite bounds, so a chunk that is stopped rewritten could exhaust
	// the machine's memory as it is.
	ours = runChunk(wrapper, true)
	if errors.Is(ours.sent, abi.ErrTimeout) || errors.Is(ours.sent, abi.ErrMemory) {
		t.Skip("hit a limit")
	}
	return runChunk(plain, false), ours
}

// FuzzConcatRewrite checks the .. rewrite against gopher-lua's own
// compilation of the same source, in the same sandbox: same globals, log
// lines and errors (message and line). Runs that hit a limit are not
// compared (the rewritten chunk accounts its concatenations; timing
// differs).
func FuzzConcatRewrite(f *testing.F) {
	for _, seed := range []string{
		rule50,
		`x = "a" .. "b" .. 1 .. 2.5`,
		`local t = setmetatable({}, {__concat = function(a, b) return "m" end}) x = t .. "a" .. t .. 1`,
		`local function f(...) return ... .. "z", "q" .. ... end x, y = f("a", "b")`,
		`local function f() return "x", "y" end x = "a" .. f() y = f() .. "b" .. f()`,
		`x = ("a" .. ("b" .. "c")) .. (("d" .. "e") .. "f")`,
		`x = "a" .. nil`,
		`x = {} .. "a"`,
		`local a = "x" x = a .. a .. a .. a .. a .. a .. a .. a .. a .. a`,
		`for i = 1, 3 do x = (x or "") .. i .. "," end`,
		`local s = "" repeat local r = s .. "a" s = r until #s > 3 x = s`,
		`x = #("a" .. "bc") .. -1 .. not nil`,
		`function g(a) return a .. "!" end x = g("a" .. "b") .. g(g("c"))`,
		`local t = {a = "1" .. "2", ["k" .. 1] = 3, "v" .. 4} x = t.a .. t.k1 .. t[1]`,
		`local o = {n = "o"} function o:m(s) return self.n .. s end x = o:m("a" .. "b")`,
		`while (x or "") .. "" ~= "aaa" do x = (x or "") .. "a" end`,
		`if "a" .. "b" == "ab" then x = "yes" .. "!" else x = "no" end`,
		`x = pcall(function() return "a" .. {} end) .. ""`,
		`goto skip x = "a" .. "b" ::skip:: y = "c" .. "d"`,
		`print("a" .. 1, 2 .. "b") return "r" .. "s"`,
		`x = ... and "v" .. ... or "none"`,
		`local s = string.rep("x", 100) x = #(s .. s .. s)`,
		"x = 'a' ..\n 'b' ..\n nil",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if len(src) > 4096 || bytes.Count([]byte(src), []byte("..")) == 0 {
			t.Skip()
		}
		// Every run is limited to 20 ms: one still going after 30 s is
		// stuck in code that ignores the deadline. Crash with the stacks, so
		// the fuzzer records the input, rather than hang.
		hang := time.AfterFunc(30*time.Second, func() {
			buf := make([]byte, 1<<20)
			panic(fmt.Sprintf("input %q still running after 30 s:\n%s", src, buf[:runtime.Stack(buf, true)]))
		})
		defer hang.Stop()
		orig, ours := runBoth(t, src)
		if errors.Is(orig.sent, abi.ErrTimeout) || errors.Is(orig.sent, abi.ErrMemory) {
			t.Skip("hit a limit")
		}
		if orig != ours {
			t.Errorf("gopher-lua:\n  error %q at line %d\n  globals %s\n  logs %q\nrewritten:\n  error %q at line %d\n  globals %s\n  logs %q",
				orig.err, orig.line, orig.globals, orig.logs, ours.err, ours.line, ours.globals, ours.logs)
		}
	})
}
