package wasm

import (
	"encoding/binary"

	"github.com/tetratelabs/wazero/api"

	"github.com/ssrun/ssrun/abi"
)

// A tiny WebAssembly binary writer for hand-made test modules: enough for
// imports, functions, one memory and exports.

type wImport struct {
	module, name    string
	params, results []api.ValueType
}

type wFunc struct {
	export          string
	params, results []api.ValueType
	body            []byte // instructions, without the final end
}

type wModule struct {
	imports   []wImport
	funcs     []wFunc
	memPages  uint32 // minimum pages of the defined memory; 0 = none
	memExport string
	memImport bool // import env.memory instead of defining one
}

// uleb and sleb encode v as unsigned and signed LEB128 (the package's
// encoder for the signed form).
func uleb(v uint64) []byte { return binary.AppendUvarint(nil, v) }

func sleb(v int64) []byte { return appendSLEB(nil, v) }

func wName(s string) []byte { return append(uleb(uint64(len(s))), s...) }

func wVec(items [][]byte) []byte {
	b := uleb(uint64(len(items)))
	for _, it := range items {
		b = append(b, it...)
	}
	return b
}

func wSection(id byte, items [][]byte) []byte {
	body := wVec(items)
	return append(append([]byte{id}, uleb(uint64(len(body)))...), body...)
}

func wFuncType(params, results []api.ValueType) []byte {
	b := append([]byte{0x60}, uleb(uint64(len(params)))...)
	b = append(b, params...)
	b = append(b, uleb(uint64(len(results)))...)
	return append(b, results...)
}

// Instructions.
func i32c(v int32) []byte   { return append([]byte{0x41}, sleb(int64(v))...) }
func i64c(v int64) []byte   { return append([]byte{0x42}, sleb(v)...) }
func call(idx int) []byte   { return append([]byte{0x10}, uleb(uint64(idx))...) }
func localGet(i int) []byte { return append([]byte{0x20}, uleb(uint64(i))...) }
func ops(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

var (
	opUnreachable = []byte{0x00}
	opDrop        = []byte{0x1a}
	opSpin        = []byte{0x03, 0x40, 0x0c, 0x00, 0x0b} // loop br 0 end
)

func (m wModule) bytes() []byte {
	out := []byte{0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}
	var types, imports, funcs, exports, codes [][]byte
	for i, im := range m.imports {
		types = append(types, wFuncType(im.params, im.results))
		imports = append(imports, ops(wName(im.module), wName(im.name), []byte{0x00}, uleb(uint64(i))))
	}
	if m.memImport {
		imports = append(imports, ops(wName("env"), wName("memory"), []byte{0x02, 0x00}, uleb(1)))
	}
	for i, f := range m.funcs {
		types = append(types, wFuncType(f.params, f.results))
		funcs = append(funcs, uleb(uint64(len(m.imports)+i)))
		if f.export != "" {
			exports = append(exports, ops(wName(f.export), []byte{0x00}, uleb(uint64(len(m.imports)+i))))
		}
		body := ops([]byte{0x00}, f.body, []byte{0x0b}) // no locals
		codes = append(codes, ops(uleb(uint64(len(body))), body))
	}
	if m.memExport != "" {
		exports = append(exports, ops(wName(m.memExport), []byte{0x02, 0x00}))
	}
	out = append(out, wSection(1, types)...)
	if len(imports) > 0 {
		out = append(out, wSection(2, imports)...)
	}
	out = append(out, wSection(3, funcs)...)
	if m.memPages > 0 && !m.memImport {
		out = append(out, wSection(5, [][]byte{ops([]byte{0x00}, uleb(uint64(m.memPages)))})...)
	}
	out = append(out, wSection(7, exports)...)
	return append(out, wSection(10, codes)...)
}

// handParams lists the parameter types of an ABI v1 host function, written
// out from abi/doc.go independently of hostFuncs.
var handParams = map[string][]api.ValueType{
	abi.FnGet:       {i32, i32, i32, i32, i32},
	abi.FnSet:       {i32, i32, i32, i32, i32, i64, i32, i32, i32, i32, i32},
	abi.FnDel:       {i32, i32, i32, i32},
	abi.FnVDel:      {i32, i32, i32, i32, i32, i32},
	abi.FnWatch:     {i32, i32, i32},
	abi.FnUnwatch:   {i32, i32},
	abi.FnLock:      {i32, i32, i64, i64, i32, i32, i32},
	abi.FnUnlock:    {i32, i32},
	abi.FnLog:       {i32, i32, i32},
	abi.FnResult:    {i32, i32, i32},
	abi.FnLastError: {i32, i32, i32},
	abi.FnTimer:     {i32, i32, i64, i64, i32, i32},
	abi.FnCancel:    {i32, i32},
	abi.FnNow:       {i32},
	// Revision 3.
	abi.FnKeys:           {i32, i32, i64, i32, i32, i32},
	abi.FnWatchPattern:   {i32, i32, i32},
	abi.FnUnwatchPattern: {i32, i32},
}

// handAllocAt is where the hand-made guest's ssrun_alloc puts every event.
const handAllocAt = 60 << 10

// handGuest returns a valid hand-made rule: it imports every host
// function, exports "call_<name>" forwarding to each import, and the ABI
// exports (version 1, a fixed-address ssrun_alloc, ssrun_on_event running
// onEvent or returning 0).
func handGuest(onEvent []byte) wModule { return handGuestOf(abi.HostFunctions(), onEvent) }

// handGuestOf is handGuest importing only the host functions named (e.g.
// those of an earlier revision), in that order.
func handGuestOf(imports []string, onEvent []byte) wModule {
	m := wModule{memPages: 1, memExport: "memory"}
	for i, name := range imports {
		params := handParams[name]
		m.imports = append(m.imports, wImport{abi.ImportModule, name, params, []api.ValueType{i32}})
		var body []byte
		for j := range params {
			body = append(body, localGet(j)...)
		}
		m.funcs = append(m.funcs, wFunc{export: "call_" + name, params: params, results: []api.ValueType{i32}, body: ops(body, call(i))})
	}
	if onEvent == nil {
		onEvent = i32c(0)
	}
	m.funcs = append(m.funcs,
		wFunc{export: abi.ExportABIVersion, results: []api.ValueType{i32}, body: i32c(abi.Version)},
		wFunc{export: abi.ExportAlloc, params: []api.ValueType{i32}, results: []api.ValueType{i32}, body: i32c(handAllocAt)},
		wFunc{export: abi.ExportOnEvent, params: []api.ValueType{i32, i32}, results: []api.ValueType{i32}, body: onEvent},
	)
	return m
}

// importIndex is the function index of host function name in handGuest.
func importIndex(name string) int {
	for i, n := range abi.HostFunctions() {
		if n == name {
			return i
		}
	}
	panic("no host function " + name)
}

// withFunc returns m with f replacing the function exported under the same
// name, or added.
func (m wModule) withFunc(f wFunc) wModule {
	funcs := append([]wFunc(nil), m.funcs...)
	for i := range funcs {
		if funcs[i].export == f.export {
			funcs[i] = f
			m.funcs = funcs
			return m
		}
	}
	m.funcs = append(funcs, f)
	return m
}

// without returns m without the function exported as name.
func (m wModule) without(name string) wModule {
	var funcs []wFunc
	for _, f := range m.funcs {
		if f.export != name {
			funcs = append(funcs, f)
		}
	}
	m.funcs = funcs
	return m
}
