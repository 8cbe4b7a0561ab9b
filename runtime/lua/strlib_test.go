package lua

import (
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"

	"github.com/ssrun/ssrun/abi/abitest"
)

// callString calls the string library function name of L with args and
// returns its result, or the error.
func callString(L *glua.LState, name string, args ...glua.LValue) (glua.LValue, error) {
	fn := L.GetField(L.GetGlobal("string"), name)
	if err := L.CallByParam(glua.P{Fn: fn, NRet: 1, Protect: true}, args...); err != nil {
		return nil, err
	}
	v := L.Get(-1)
	L.Pop(1)
	return v, nil
}

// FuzzStringBuilders checks the string builders that replace gopher-lua's
// (strlib.go) against gopher-lua's own on the same arguments: the same
// results, and failing on the same arguments.
func FuzzStringBuilders(f *testing.F) {
	for _, seed := range []struct {
		tmpl, s string
		n       float64
		i, j    int
	}{
		{"%5.2f|%-3d|%%|%02x", "abc", 3.14159, 1, 2},
		{"%s=%q", "a \"b\"\n\x00\xff\u2028", 1e300, -3, -1},
		{"%-10s|%10.3s|%x|%X", "héllo wörld", -0.5, 0, 100},
		{"%c%c%d%i%o%u%e%E%g%G", "ǅǈ ΣΑΣ ß ﬁ İ", 65, 2, 1},
		{"%s %s", "ÀÉÎõü\xc3", 1, -100, 3},
		{"100%% %s", "", 0, 5, 4},
		{"%#x %+d % d %05.1f", "ɐɑɒ\U0001F600", 255, 3, 3},
	} {
		f.Add(seed.tmpl, seed.s, seed.n, seed.i, seed.j)
	}
	f.Fuzz(func(t *testing.T, tmpl, s string, n float64, i, j int) {
		ours := newState(Config{}.withDefaults(), abitest.New(), 1<<30)
		defer ours.L.Close()
		theirs := glua.NewState(glua.Options{SkipOpenLibs: true})
		defer theirs.Close()
		theirs.Push(theirs.NewFunction(glua.OpenString))
		theirs.Call(0, 0)

		type call struct {
			name string
			args []glua.LValue
		}
		calls := []call{
			{"upper", []glua.LValue{glua.LString(s)}},
			{"lower", []glua.LValue{glua.LString(s)}},
			{"reverse", []glua.LValue{glua.LString(s)}},
			{"sub", []glua.LValue{glua.LString(s), glua.LNumber(i)}},
			{"sub", []glua.LValue{glua.LString(s), glua.LNumber(i), glua.LNumber(j)}},
			{"rep", []glua.LValue{glua.LString(s), glua.LNumber(i % 8)}},
		}
		if checkFormat(tmpl) == nil {
			// As many operands as directives: gopher-lua appends extra ones.
			directives := strings.Count(tmpl, "%") - 2*strings.Count(tmpl, "%%")
			args := []glua.LValue{glua.LString(tmpl)}
			for k := range directives {
				if k%2 == 0 {
					args = append(args, glua.LString(s))
				} else {
					args = append(args, glua.LNumber(n))
				}
			}
			if directives >= 0 {
				calls = append(calls, call{"format", args})
			}
		}
		for _, c := range calls {
			got, gotErr := callString(ours.L, c.name, c.args...)
			want, wantErr := callString(theirs, c.name, c.args...)
			if (gotErr != nil) != (wantErr != nil) {
				t.Fatalf("string.%s%v: ours %v, %v; gopher-lua's %v, %v", c.name, c.args, got, gotErr, want, wantErr)
			}
			if gotErr == nil && got.String() != want.String() {
				t.Fatalf("string.%s%v: ours %q, gopher-lua's %q", c.name, c.args, got, want)
			}
		}
	})
}
