package lua

import (
	"context"
	"errors"
	"math/bits"
	"unsafe"

	glua "github.com/yuin/gopher-lua"
)

// What gopher-lua allocates for each kind of value, in bytes (Go 1.26,
// 64-bit), as TestStateBytesEstimate checks against the Go heap.
const (
	valueBytes = 16 // an LValue: a slot of a table, of the value stack, a map key or value
	boxBytes   = 16 // the heap box of a string stored in an LValue
	// numberBytes is the boxed float64 of a number: gopher-lua allocates
	// them 8 bytes at a time in shared blocks, and a block lives while any
	// of its numbers does, so a kept number usually keeps a garbage one
	// (a loop counter) with it.
	numberBytes   = 16
	tableBytes    = 96 // an LTable
	functionBytes = 64 // an LFunction
	upvalueBytes  = 56 // an Upvalue and the pointer to it
	userdataBytes = 64 // an LUserData (its Go value is not counted)
	mapBytes      = 48 // a Go map's header
	// strdictMin is the capacity assumed of a small string-keyed map:
	// gopher-lua makes it with room for 32 keys when a table gets its first
	// string key by assignment, for as many as its constructor has
	// otherwise; which one is not visible, so small maps count for 16.
	strdictMin = 16
)

// shortString is the length under which a string is counted at every
// reference (remembering it would cost more than it); longer strings are
// counted once, by where their bytes are.
const shortString = 32

// measureCheckSteps is how many values are visited between two looks at
// the call's context.
const measureCheckSteps = 4096

// errOverBudget stops a measure once the estimate passes its budget.
var errOverBudget = errors.New("over budget")

// sizer estimates the memory reachable from a state's roots.
type sizer struct {
	ctx    context.Context
	budget int64
	total  int64
	steps  int
	seen   map[unsafe.Pointer]struct{} // tables, functions, userdata, long strings
	todo   []glua.LValue               // tables, functions and userdata to walk
}

// stateBytes estimates the bytes the values of L hold: its value stack
// (every register of every active function), globals, registry and the
// other roots given (the strings' metatable), and everything reachable from
// them. Compiled code is not
// counted (it is shared by every state of a rule). It stops once the
// estimate passes budget (over) or ctx ends (err); the walk costs time
// linear in what it counts, and a set of the tables, functions and long
// strings it has seen. Call it only on the goroutine running L.
func stateBytes(ctx context.Context, L *glua.LState, budget int64, roots ...glua.LValue) (total int64, over bool, err error) {
	z := &sizer{ctx: ctx, budget: budget, seen: map[unsafe.Pointer]struct{}{}}
	err = z.walk(L, roots)
	if errors.Is(err, errOverBudget) {
		return z.total, true, nil
	}
	return z.total, false, err
}

func (z *sizer) walk(L *glua.LState, roots []glua.LValue) error {
	stack := stackValues(L)
	z.total += int64(cap(stack)) * valueBytes
	for _, v := range stack {
		if err := z.value(v); err != nil {
			return err
		}
	}
	for _, v := range append([]glua.LValue{L.G.Global, L.G.Registry, L.Env}, roots...) {
		if err := z.value(v); err != nil {
			return err
		}
	}
	for len(z.todo) > 0 {
		v := z.todo[len(z.todo)-1]
		z.todo = z.todo[:len(z.todo)-1]
		if err := z.object(v); err != nil {
			return err
		}
	}
	return nil
}

// add counts n bytes; it fails once the total passes the budget, and every
// measureCheckSteps calls when the context has ended.
func (z *sizer) add(n int64) error {
	z.total += n
	if z.total > z.budget {
		return errOverBudget
	}
	if z.steps++; z.steps >= measureCheckSteps {
		z.steps = 0
		return z.ctx.Err()
	}
	return nil
}

// value counts a value stored in a slot that its container already
// counted: the bytes behind it, once for each object.
func (z *sizer) value(v glua.LValue) error {
	switch v := v.(type) {
	case glua.LString:
		return z.str(string(v))
	case glua.LNumber:
		return z.add(numberBytes)
	case *glua.LTable:
		z.push(unsafe.Pointer(v), v)
	case *glua.LFunction:
		z.push(unsafe.Pointer(v), v)
	case *glua.LUserData:
		z.push(unsafe.Pointer(v), v)
	}
	return nil
}

// push schedules object v (at p) unless it was seen.
func (z *sizer) push(p unsafe.Pointer, v glua.LValue) {
	if p == nil {
		return
	}
	if _, ok := z.seen[p]; ok {
		return
	}
	z.seen[p] = struct{}{}
	z.todo = append(z.todo, v)
}

// str counts a string's box and bytes; a long one once.
func (z *sizer) str(s string) error {
	if len(s) >= shortString {
		p := unsafe.Pointer(unsafe.StringData(s))
		if _, ok := z.seen[p]; ok {
			return nil
		}
		z.seen[p] = struct{}{}
	}
	return z.add(boxBytes + int64(len(s)))
}

// object counts a table, function or userdata and what it refers to.
func (z *sizer) object(v glua.LValue) error {
	switch v := v.(type) {
	case *glua.LTable:
		return z.table(v)
	case *glua.LFunction:
		if err := z.add(functionBytes + int64(len(v.Upvalues))*upvalueBytes); err != nil {
			return err
		}
		if v.Env != nil {
			if err := z.value(v.Env); err != nil {
				return err
			}
		}
		for _, uv := range v.Upvalues {
			if uv != nil {
				if err := z.value(uv.Value()); err != nil {
					return err
				}
			}
		}
	case *glua.LUserData:
		if err := z.add(userdataBytes); err != nil {
			return err
		}
		if err := z.value(v.Metatable); err != nil {
			return err
		}
		if v.Env != nil {
			return z.value(v.Env)
		}
	}
	return nil
}

func (z *sizer) table(t *glua.LTable) error {
	p := partsOf(t)
	size := int64(tableBytes) +
		int64(cap(p.array)+cap(p.keys))*valueBytes +
		mapSize(p.dict != nil, len(p.dict), 0, 2*valueBytes) +
		mapSize(p.strdict != nil, len(p.strdict), strdictMin, 2*valueBytes) +
		mapSize(p.k2i != nil, len(p.k2i), 0, valueBytes+8) +
		int64(len(p.keys))*boxBytes // keys holds its own box of each string key
	if err := z.add(size); err != nil {
		return err
	}
	if err := z.value(t.Metatable); err != nil {
		return err
	}
	for _, v := range p.array {
		if err := z.value(v); err != nil {
			return err
		}
	}
	for k, v := range p.strdict {
		if err := z.str(k); err != nil {
			return err
		}
		if err := z.value(v); err != nil {
			return err
		}
	}
	for k, v := range p.dict {
		if err := z.value(k); err != nil {
			return err
		}
		if err := z.value(v); err != nil {
			return err
		}
	}
	return nil
}

// mapSize estimates a Go map (none unless made) of n entries, counted as at
// least least entries, whose key and value take slot bytes: Go's swiss
// tables keep a control byte per slot, fill at most 7/8 of their slots, and
// double, so a map of n entries has the next power of two above 8n/7 slots.
func mapSize(made bool, n, least int, slot int64) int64 {
	if !made {
		return 0
	}
	n = max(n, least)
	slots := max(8, 1<<bits.Len(uint(n*8/7)))
	return mapBytes + int64(slots)*(slot+1)
}
