package lua

import (
	"errors"
	"reflect"
	"unsafe"

	glua "github.com/yuin/gopher-lua"
)

// table.sort sorts a table's array part in place, as gopher-lua's does, and
// that part is unexported in gopher-lua v1.1.2 (LTable.array []LValue).
// findLayout locates it by reflection once and checks its type. A
// gopher-lua whose layout differs sets layoutErr, and Compile fails with it.

// layout holds the offsets of the fields above.
var layout struct {
	tabArray uintptr // LTable.array
}

// layoutErr is set when gopher-lua's types do not have the layout above.
var layoutErr = findLayout()

func findLayout() error {
	errChanged := errors.New("lua: gopher-lua's LTable no longer has the fields runtime/lua/layout.go reads; update it for this gopher-lua version")
	field := func(t reflect.Type, name string, want reflect.Type, off *uintptr) bool {
		f, ok := t.FieldByName(name)
		if !ok || f.Type != want {
			return false
		}
		*off = f.Offset
		return true
	}
	if !field(reflect.TypeFor[glua.LTable](), "array", reflect.TypeFor[[]glua.LValue](), &layout.tabArray) {
		return errChanged
	}
	return nil
}

// tableParts is an LTable's storage, as gopher-lua keeps it.
type tableParts struct {
	array []glua.LValue
}

// partsOf returns t's storage. The slices are t's own: use them only on
// the goroutine running the state.
func partsOf(t *glua.LTable) tableParts {
	p := unsafe.Pointer(t)
	return tableParts{
		array: *(*[]glua.LValue)(unsafe.Add(p, layout.tabArray)),
	}
}
