package lua

import (
	"errors"
	"reflect"
	"unsafe"

	glua "github.com/yuin/gopher-lua"
)

// The memory account (account.go) must see every value a state holds and
// what each table costs. Two things it needs are unexported in gopher-lua
// v1.1.2:
//
//   - the value stack, LState.reg (a *registry with array []LValue and top
//     int): the registers of every active function, including the
//     temporaries of expressions being evaluated and the extra arguments of
//     vararg functions. The public API reaches the current function's
//     registers and the named locals of the others, not the rest, so a rule
//     could hide memory there (a vararg recursion carrying one big string
//     per level);
//   - an LTable's parts (array and keys []LValue, dict map[LValue]LValue,
//     strdict map[string]LValue, k2i map[LValue]int): their sizes are what
//     a table costs, and iterating them directly is several times faster
//     than ForEach.
//
// findLayout locates these fields by reflection once and checks their
// types. A gopher-lua whose layout differs sets layoutErr, and Compile
// fails with it instead of running rules with a blind account.

// layout holds the offsets of the fields above.
var layout struct {
	reg, regArray, regTop                          uintptr // LState.reg, registry.array, registry.top
	tabArray, tabDict, tabStrdict, tabKeys, tabK2i uintptr // LTable's parts
}

// layoutErr is set when gopher-lua's types do not have the layout above.
var layoutErr = findLayout()

func findLayout() error {
	errChanged := errors.New("lua: gopher-lua's LState or LTable no longer has the fields runtime/lua/layout.go reads; update it for this gopher-lua version")
	field := func(t reflect.Type, name string, want reflect.Type, off *uintptr) bool {
		f, ok := t.FieldByName(name)
		if !ok || (want != nil && f.Type != want) {
			return false
		}
		*off = f.Offset
		return true
	}
	reg, ok := reflect.TypeFor[glua.LState]().FieldByName("reg")
	if !ok || reg.Type.Kind() != reflect.Pointer || reg.Type.Elem().Kind() != reflect.Struct {
		return errChanged
	}
	layout.reg = reg.Offset
	values := reflect.TypeFor[[]glua.LValue]()
	tab := reflect.TypeFor[glua.LTable]()
	if !field(reg.Type.Elem(), "array", values, &layout.regArray) ||
		!field(reg.Type.Elem(), "top", reflect.TypeFor[int](), &layout.regTop) ||
		!field(tab, "array", values, &layout.tabArray) ||
		!field(tab, "dict", reflect.TypeFor[map[glua.LValue]glua.LValue](), &layout.tabDict) ||
		!field(tab, "strdict", reflect.TypeFor[map[string]glua.LValue](), &layout.tabStrdict) ||
		!field(tab, "keys", values, &layout.tabKeys) ||
		!field(tab, "k2i", reflect.TypeFor[map[glua.LValue]int](), &layout.tabK2i) {
		return errChanged
	}
	return nil
}

// stackValues returns the values on L's value stack, bottom to top: every
// register of every function active in L. Call it only on the goroutine
// running L (the stack changes with every instruction).
func stackValues(L *glua.LState) []glua.LValue {
	reg := *(*unsafe.Pointer)(unsafe.Add(unsafe.Pointer(L), layout.reg))
	if reg == nil {
		return nil
	}
	array := *(*[]glua.LValue)(unsafe.Add(reg, layout.regArray))
	top := *(*int)(unsafe.Add(reg, layout.regTop))
	return array[:min(max(top, 0), len(array))]
}

// tableParts is an LTable's storage, as gopher-lua keeps it.
type tableParts struct {
	array, keys []glua.LValue
	dict        map[glua.LValue]glua.LValue
	strdict     map[string]glua.LValue
	k2i         map[glua.LValue]int
}

// partsOf returns t's storage. The slices and maps are t's own: read them
// only on the goroutine running the state, and never write them.
func partsOf(t *glua.LTable) tableParts {
	p := unsafe.Pointer(t)
	return tableParts{
		array:   *(*[]glua.LValue)(unsafe.Add(p, layout.tabArray)),
		keys:    *(*[]glua.LValue)(unsafe.Add(p, layout.tabKeys)),
		dict:    *(*map[glua.LValue]glua.LValue)(unsafe.Add(p, layout.tabDict)),
		strdict: *(*map[string]glua.LValue)(unsafe.Add(p, layout.tabStrdict)),
		k2i:     *(*map[glua.LValue]int)(unsafe.Add(p, layout.tabK2i)),
	}
}
