package lua

import (
	"math"
	"math/rand/v2"
	"sort"

	glua "github.com/yuin/gopher-lua"
)

// Library functions replaced because gopher-lua's ignore the deadline or
// answer like Go rather than Lua.

// sortCheckSteps is how many comparisons table.sort makes between two
// looks at the call's context.
const sortCheckSteps = 256

// tableSort implements table.sort(t [, comp]) as gopher-lua does (a Go
// sort of t's array part, in place) but stops at the call's deadline:
// with a Go comparator (math.min) no Lua instruction runs between
// comparisons, so gopher-lua's sort ran 5 s past a 1 s deadline on a
// million elements.
func (st *state) tableSort(L *glua.LState) int {
	t := L.CheckTable(1)
	var comp glua.LValue = glua.LNil
	if L.GetTop() >= 2 && L.Get(2) != glua.LNil {
		comp = L.CheckFunction(2)
	}
	array := partsOf(t).array
	s := &sorter{L: L, st: st, comp: comp, values: array[:t.Len()]}
	sort.Sort(s)
	return 0
}

type sorter struct {
	L      *glua.LState
	st     *state
	comp   glua.LValue // a function, or nil for <
	values []glua.LValue
	steps  int
}

func (s *sorter) Len() int      { return len(s.values) }
func (s *sorter) Swap(i, j int) { s.values[i], s.values[j] = s.values[j], s.values[i] }
func (s *sorter) Less(i, j int) bool {
	if s.steps++; s.steps >= sortCheckSteps {
		s.steps = 0
		if err := s.st.ctx().Err(); err != nil {
			s.L.RaiseError("%v", err)
		}
	}
	if s.comp == glua.LNil {
		return s.L.LessThan(s.values[i], s.values[j])
	}
	s.L.Push(s.comp)
	s.L.Push(s.values[i])
	s.L.Push(s.values[j])
	s.L.Call(2, 1)
	less := glua.LVAsBool(s.L.Get(-1))
	s.L.Pop(1)
	return less
}

// mathRandom returns math.random as Lua 5.1 documents it: () a float in
// [0,1), (m) an integer in [1,m], (m, n) one in [m,n], drawn from r (Go's
// process-wide source when nil). gopher-lua's handed an empty interval to
// Go's rand.Intn, whose panic ("invalid argument to Intn") reached the
// rule.
func mathRandom(r *rand.Rand) glua.LGFunction {
	float, int64n := rand.Float64, rand.Int64N
	if r != nil {
		float, int64n = r.Float64, r.Int64N
	}
	return func(L *glua.LState) int {
		switch L.GetTop() {
		case 0:
			L.Push(glua.LNumber(float()))
			return 1
		case 1, 2:
		default:
			L.RaiseError("wrong number of arguments")
		}
		lo, hi := int64(1), int64(L.CheckNumber(1))
		arg := 1
		if L.GetTop() == 2 {
			lo, hi, arg = int64(L.CheckNumber(1)), int64(L.CheckNumber(2)), 2
		}
		if lo > hi {
			L.ArgError(arg, "interval is empty")
		}
		if hi-lo < 0 || hi-lo == math.MaxInt64 { // overflowed, or no room for +1
			L.ArgError(arg, "interval is too large")
		}
		L.Push(glua.LNumber(lo + int64n(hi-lo+1)))
		return 1
	}
}
