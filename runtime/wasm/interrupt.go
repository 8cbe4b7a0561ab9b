package wasm

import (
	"encoding/binary"
	"fmt"
	"slices"
)

// interruptExport is the name under which instrument exports the interrupt
// flag, and startExport the one under which it exports the module's start
// function (its start section removed: instantiate calls it, under the
// flag). A module that exports either name itself is refused.
const (
	interruptExport = "ssrun.interrupt"
	startExport     = "ssrun.start"
)

// tickEvery is how many checks (see instrument) a guest runs between two
// visits to Go: the number of loop iterations and calls for which it may
// hold up the Go runtime (a garbage collection) or see the interrupt flag
// late.
const tickEvery = 4096

// instrument returns src with interrupt checks: right after every loop
// instruction, and at the start of every function that calls another
// (unless it starts with a loop, whose check comes first anyway), it
// inserts
//
//	global.get $count; i32.const 1; i32.sub; global.set $count
//	global.get $count; i32.eqz; if; call $tick; end
//
// and every tickEvery checks the added function $tick traps (unreachable)
// if the interrupt flag is set, resets $count, and returns to Go for a
// moment (memory.grow 0: wazero runs memory.grow in Go). $flag is a
// mutable i32 global exported as interruptExport that only the host sets;
// $count belongs to the guest (two globals, so that no write of one side
// overwrites the other's). Every unbounded computation iterates a loop or
// calls (recursion, or the exponential call tree of a naive fib, which has
// no loop at all), so setting the flag stops a guest soon, however it
// runs. A function that calls nothing needs no check of its own: it ends,
// or loops, without one.
//
// This replaces wazero's WithCloseOnContextDone, which returns from the
// compiled code to Go at every loop header to look at the call's context:
// Go's wasm port opens almost every function with a loop, so every Go
// function call paid for it. A check costs a decrement and a branch, and
// needs no goroutine per call (see instance.call for how a call arms the
// flag). The guest must still return to Go now and then, which is why
// $tick does not only read the flag: compiled wasm cannot be preempted,
// and a guest that never left it would hold up every stop-the-world of the
// Go runtime (a garbage collection), and with it every goroutine, the one
// that would set the flag included, until the guest ends by itself (see
// "Why context cancellation is handled in Go code" in wazero's
// RATIONALE.md).
//
// The type, function, global, export and code sections change (each is
// added if missing), by appending to them: every existing index stays, so
// the name section and every other section are kept byte for byte.
// instrument decodes every instruction of every body (the features wazero
// enables by default: WebAssembly 2.0, i.e. MVP, sign extension,
// saturating truncation, bulk memory, reference types, multi-value and
// SIMD); an opcode it does not know is an error naming it and its offset
// in src: a module that could not be instrumented must not run.
func instrument(src []byte) ([]byte, error) {
	out, _, err := instrumentCount(src)
	return out, err
}

// instrumentCount is instrument, also returning the number of checks
// inserted.
func instrumentCount(src []byte) ([]byte, int, error) {
	secs, err := readSections(src)
	if err != nil {
		return nil, 0, err
	}
	if err := checkVectors(secs); err != nil {
		return nil, 0, err
	}
	var known [14]*section // by id
	for i := range secs {
		s := &secs[i]
		if s.id == 0 || int(s.id) >= len(known) {
			continue
		}
		if known[s.id] != nil {
			return nil, 0, fmt.Errorf("section %d appears twice (at offsets %d and %d)", s.id, known[s.id].start, s.start)
		}
		known[s.id] = s
	}
	var imported [4]uint64 // functions, tables, memories, globals
	if s := known[2]; s != nil {
		if imported, err = importCounts(s); err != nil {
			return nil, 0, err
		}
	}
	// head reads the count of a vector section (0 if it is missing) and
	// returns it with the rest of its payload.
	head := func(id byte, what string) (uint32, []byte, error) {
		s := known[id]
		if s == nil {
			return 0, nil, nil
		}
		r := reader{p: s.payload, base: s.payloadOffset()}
		n, err := r.u32(what)
		return n, r.rest(), err
	}
	nTypes, types, err := head(1, "type count")
	if err != nil {
		return nil, 0, err
	}
	nFuncs, funcs, err := head(3, "function count")
	if err != nil {
		return nil, 0, err
	}
	nMems, _, err := head(5, "memory count")
	if err != nil {
		return nil, 0, err
	}
	nGlobals, globals, err := head(6, "global count")
	if err != nil {
		return nil, 0, err
	}
	flag := imported[3] + uint64(nGlobals)
	count := flag + 1
	tick := imported[0] + uint64(nFuncs)

	changed := map[byte][]byte{}
	vec := func(n uint32, rest []byte, add ...[]byte) []byte {
		b := binary.AppendUvarint(nil, uint64(n)+uint64(len(add)))
		b = append(b, rest...)
		for _, a := range add {
			b = append(b, a...)
		}
		return b
	}
	changed[1] = vec(nTypes, types, []byte{0x60, 0, 0}) // () -> ()
	changed[3] = vec(nFuncs, funcs, binary.AppendUvarint(nil, uint64(nTypes)))
	changed[6] = vec(nGlobals, globals,
		[]byte{0x7f, 0x01, 0x41, 0x00, 0x0b},                                          // $flag: mutable i32 = 0
		append(append([]byte{0x7f, 0x01, 0x41}, appendSLEB(nil, tickEvery)...), 0x0b)) // $count
	export := append(wasmName(nil, interruptExport), 0x03)
	export = binary.AppendUvarint(export, flag)
	nExports, exports := uint32(0), []byte(nil)
	if s := known[7]; s != nil {
		if nExports, exports, err = exportEntries(s); err != nil {
			return nil, 0, err
		}
	}
	adds := [][]byte{export}
	if s := known[8]; s != nil { // the start function: exported, its section dropped
		r := reader{p: s.payload, base: s.payloadOffset()}
		fn, err := r.u32("start function")
		if err != nil {
			return nil, 0, err
		}
		if uint64(fn) >= tick {
			return nil, 0, fmt.Errorf("start function %d at offset %d: the module has %d functions", fn, s.payloadOffset(), tick)
		}
		adds = append(adds, binary.AppendUvarint(append(wasmName(nil, startExport), 0x00), uint64(fn)))
	}
	changed[7] = vec(nExports, exports, adds...)

	// The check, and $tick's body.
	check := binary.AppendUvarint([]byte{0x23}, count)
	check = append(check, 0x41, 0x01, 0x6b, 0x24)
	check = binary.AppendUvarint(check, count)
	check = binary.AppendUvarint(append(check, 0x23), count)
	check = binary.AppendUvarint(append(check, 0x45, 0x04, 0x40, 0x10), tick)
	check = append(check, 0x0b)
	body := binary.AppendUvarint([]byte{0x00, 0x23}, flag) // no locals
	body = append(body, 0x04, 0x40, 0x00, 0x0b, 0x41)
	body = append(appendSLEB(body, tickEvery), 0x24)
	body = binary.AppendUvarint(body, count)
	if nMems > 0 || imported[2] > 0 {
		// A module without memory cannot grow it; it is refused anyway
		// (checkModule), but only after it compiled.
		body = append(body, 0x41, 0x00, 0x40, 0x00, 0x1a) // memory.grow 0; drop
	}
	body = append(body, 0x0b)
	tickCode := append(binary.AppendUvarint(nil, uint64(len(body))), body...)
	checks := 0
	if s := known[10]; s != nil {
		if changed[10], checks, err = instrumentCode(s, check, tickCode, bounds{globals: flag, funcs: tick}); err != nil {
			return nil, 0, err
		}
	} else {
		changed[10] = vec(0, nil, tickCode)
	}

	out := make([]byte, 0, len(src)+len(src)/4+64)
	out = append(out, src[:8]...)
	missing := []byte{1, 3, 6, 7, 10} // in section order
	for _, s := range known {
		if s != nil {
			missing = slices.DeleteFunc(missing, func(id byte) bool { return id == s.id })
		}
	}
	addBefore := func(rank int) {
		for len(missing) > 0 && sectionRank(missing[0]) < rank {
			out = appendSection(out, missing[0], changed[missing[0]])
			missing = missing[1:]
		}
	}
	for _, s := range secs {
		if rank := sectionRank(s.id); rank >= 0 {
			addBefore(rank)
		}
		if p, ok := changed[s.id]; ok {
			out = appendSection(out, s.id, p)
		} else if s.id == 8 {
			// the start section: its function is exported as startExport
		} else {
			out = append(out, src[s.start:s.end]...)
		}
	}
	addBefore(1 << 30)
	return out, checks, nil
}

// instrumentCode returns the code section s's payload with check inserted
// (see instrument) and the body tick appended, and the number of checks
// inserted.
func instrumentCode(s *section, check, tick []byte, b bounds) ([]byte, int, error) {
	r := reader{p: s.payload, base: s.payloadOffset()}
	n, err := r.u32("function count")
	if err != nil {
		return nil, 0, err
	}
	out := make([]byte, 0, len(s.payload)+len(s.payload)/4)
	out = binary.AppendUvarint(out, uint64(n)+1)
	var at []int // insertion points in the body being instrumented
	checks := 0
	for i := range n {
		size, err := r.u32("function body size")
		if err != nil {
			return nil, 0, err
		}
		body, err := r.bytes(int(size), "function body")
		if err != nil {
			return nil, 0, fmt.Errorf("function %d: %w", i, err)
		}
		at, err = checkPoints(reader{p: body, base: r.base + r.off - len(body)}, at[:0], b)
		if err != nil {
			return nil, 0, fmt.Errorf("code of defined function %d: %w", i, err)
		}
		out = binary.AppendUvarint(out, uint64(len(body)+len(at)*len(check)))
		last := 0
		for _, p := range at {
			out = append(append(out, body[last:p]...), check...)
			last = p
		}
		out = append(out, body[last:]...)
		checks += len(at)
	}
	if r.off != len(r.p) {
		return nil, 0, fmt.Errorf("code section: %d bytes after the last function body at offset %d", len(r.p)-r.off, r.base+r.off)
	}
	return append(out, tick...), checks, nil
}

// checkPoints decodes a function body and appends to at where the checks
// go: after each loop instruction, and after the locals if the body calls
// and does not start with a loop. It fails on an opcode it does not know
// or a body that does not end with its final end.
func checkPoints(r reader, at []int, b bounds) ([]int, error) {
	groups, err := r.u32("local declaration count")
	if err != nil {
		return nil, err
	}
	locals := uint64(0)
	for range groups {
		pos := r.off
		n, err := r.u32("local count")
		if err != nil {
			return nil, err
		}
		if locals += uint64(n); locals > maxLocals {
			return nil, fmt.Errorf("local declaration at offset %d: more than %d locals: %w", r.base+pos, maxLocals, errLimit)
		}
		if _, err := r.byte("local type"); err != nil {
			return nil, err
		}
	}
	entry := r.off
	calls := false
	depth := 0 // open blocks
	for {
		if r.off == len(r.p) {
			return nil, fmt.Errorf("function body without its final end at offset %d", r.base+r.off)
		}
		pos, err := r.off, error(nil)
		op, _ := r.byte("opcode")
		switch {
		case op == 0x02 || op == 0x03 || op == 0x04: // block, loop, if
			if err := r.blockType(); err != nil {
				return nil, err
			}
			depth++
			if op == 0x03 {
				at = append(at, r.off)
			}
		case op == 0x0b: // end
			if depth == 0 {
				if r.off != len(r.p) {
					return nil, fmt.Errorf("%d bytes after the function's final end at offset %d", len(r.p)-r.off, r.base+r.off)
				}
				if calls && r.p[entry] != 0x03 {
					at = append(at, 0)
					copy(at[1:], at)
					at[0] = entry
				}
				return at, nil
			}
			depth--
		case op == 0x10 || op == 0x11: // call, call_indirect
			calls = true
			if op == 0x11 {
				err = r.skipU32s(2, "call_indirect")
			} else {
				err = r.index(b.funcs, "function", pos)
			}
		case op == 0x23 || op == 0x24: // global.get, global.set
			err = r.index(b.globals, "global", pos)
		case op == 0xd2: // ref.func
			err = r.index(b.funcs, "function", pos)
		default:
			err = r.skipImmediates(op, pos)
		}
		if err != nil {
			return nil, err
		}
	}
}

// bounds are the numbers of functions and globals of the module before
// instrument added its own: the code it decodes may name only those. A
// module naming one of the added ones was invalid, and would become valid:
// a guest that wrote the check's counter or the flag could never be
// stopped.
type bounds struct{ globals, funcs uint64 }

// index reads the index of the instruction at pos (of a what), which must
// be below n.
func (r *reader) index(n uint64, what string, pos int) error {
	i, err := r.u32(what + " index")
	if err != nil {
		return err
	}
	if uint64(i) >= n {
		return fmt.Errorf("%s %d named at offset %d: the module has %d", what, i, r.base+pos, n)
	}
	return nil
}

// skipImmediates reads the immediates of an instruction whose opcode op,
// at pos, is neither a block instruction nor end nor a call.
func (r *reader) skipImmediates(op byte, pos int) error {
	const name = "immediate" // a fmt.Sprintf per instruction would triple instrument's time
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || op == 0x0f || op == 0x1a || op == 0x1b:
		// unreachable, nop, else, return, drop, select
		return nil
	case op == 0x0c || op == 0x0d: // br, br_if
		return r.skipU32s(1, name)
	case op == 0x0e: // br_table
		n, err := r.u32("br_table length")
		if err != nil {
			return err
		}
		return r.skipU32s(int(n)+1, name)
	case op == 0x1c: // select t*
		n, err := r.u32("select type count")
		if err != nil {
			return err
		}
		_, err = r.bytes(int(n), "select types")
		return err
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		return r.skipU32s(1, name)
	case op >= 0x28 && op <= 0x3e: // loads and stores: memarg
		return r.skipU32s(2, name)
	case op == 0x3f || op == 0x40: // memory.size, memory.grow: memory index
		return r.skipU32s(1, name)
	case op == 0x41:
		return r.skipLEB(5, "i32.const")
	case op == 0x42:
		return r.skipLEB(10, "i64.const")
	case op == 0x43:
		_, err := r.bytes(4, "f32.const")
		return err
	case op == 0x44:
		_, err := r.bytes(8, "f64.const")
		return err
	case op >= 0x45 && op <= 0xc4: // numeric, sign extension
		return nil
	case op == 0xd0: // ref.null t
		_, err := r.byte("ref.null type")
		return err
	case op == 0xd1: // ref.is_null
		return nil
	case op == 0xd2: // ref.func
		return r.skipU32s(1, name)
	case op == 0xfc:
		return r.skipMisc(pos)
	case op == 0xfd:
		return r.skipSIMD(pos)
	}
	return fmt.Errorf("unknown opcode 0x%02x at offset %d", op, r.base+pos)
}

// skipMisc reads a 0xfc-prefixed instruction after its prefix.
func (r *reader) skipMisc(pos int) error {
	sub, err := r.u32("0xfc opcode")
	if err != nil {
		return err
	}
	const name = "0xfc immediate"
	switch {
	case sub <= 7: // saturating truncation
		return nil
	case sub == 8: // memory.init data memory
		return r.skipU32s(2, name)
	case sub == 9 || sub == 11 || sub == 13 || sub >= 15 && sub <= 17:
		// data.drop, memory.fill, elem.drop, table.grow/size/fill
		return r.skipU32s(1, name)
	case sub == 10 || sub == 12 || sub == 14: // memory.copy, table.init, table.copy
		return r.skipU32s(2, name)
	}
	return fmt.Errorf("unknown opcode 0xfc %d at offset %d", sub, r.base+pos)
}

// simdGaps are the opcodes in 0..255 after the 0xfd prefix that are not
// SIMD instructions (as wazero v1.12 decodes them).
var simdGaps = [256]bool{0x9a: true, 0xa2: true, 0xa5: true, 0xa6: true, 0xaf: true, 0xb0: true, 0xb2: true, 0xb3: true,
	0xb4: true, 0xbb: true, 0xc2: true, 0xc5: true, 0xc6: true, 0xcf: true, 0xd0: true, 0xd2: true, 0xd3: true, 0xd4: true, 0xe2: true, 0xee: true}

// skipSIMD reads a 0xfd-prefixed instruction after its prefix.
func (r *reader) skipSIMD(pos int) error {
	sub, err := r.u32("0xfd opcode")
	if err != nil {
		return err
	}
	const name = "0xfd immediate"
	switch {
	case sub > 0xff || simdGaps[sub]:
		return fmt.Errorf("unknown opcode 0xfd %d at offset %d", sub, r.base+pos)
	case sub <= 11 || sub == 92 || sub == 93: // loads, store, load zero: memarg
		return r.skipU32s(2, name)
	case sub == 12 || sub == 13: // v128.const, i8x16.shuffle
		_, err := r.bytes(16, name)
		return err
	case sub >= 21 && sub <= 34: // extract/replace lane
		_, err := r.byte(name)
		return err
	case sub >= 84 && sub <= 91: // load/store lane: memarg, lane
		if err := r.skipU32s(2, name); err != nil {
			return err
		}
		_, err := r.byte(name)
		return err
	}
	return nil
}

// reader decodes a part of a module binary; base is the offset of p in the
// binary, for errors.
type reader struct {
	p    []byte
	off  int
	base int
}

func (r *reader) rest() []byte { return r.p[r.off:] }

func (r *reader) truncated(what string) error {
	return fmt.Errorf("%s truncated at offset %d", what, r.base+r.off)
}

func (r *reader) byte(what string) (byte, error) {
	if r.off >= len(r.p) {
		return 0, r.truncated(what)
	}
	r.off++
	return r.p[r.off-1], nil
}

func (r *reader) bytes(n int, what string) ([]byte, error) {
	if n < 0 || n > len(r.p)-r.off {
		return nil, r.truncated(what)
	}
	r.off += n
	return r.p[r.off-n : r.off], nil
}

// u32 reads an unsigned LEB128 number that fits 32 bits.
func (r *reader) u32(what string) (uint32, error) {
	v, n := binary.Uvarint(r.p[r.off:])
	if n <= 0 || n > 5 || v > 1<<32-1 {
		return 0, fmt.Errorf("%s at offset %d: not a 32-bit LEB128 number", what, r.base+r.off)
	}
	r.off += n
	return uint32(v), nil
}

func (r *reader) skipU32s(n int, what string) error {
	for range n {
		if _, err := r.u32(what); err != nil {
			return err
		}
	}
	return nil
}

// skipLEB skips a LEB128 number of at most max bytes (its value is the
// compiler's to check).
func (r *reader) skipLEB(max int, what string) error {
	for i := 0; i < max && r.off+i < len(r.p); i++ {
		if r.p[r.off+i]&0x80 == 0 {
			r.off += i + 1
			return nil
		}
	}
	return fmt.Errorf("%s at offset %d: not a LEB128 number of at most %d bytes", what, r.base+r.off, max)
}

// blockType reads a block type: 0x40 (empty), a value type (one byte with
// the high bits of a negative sleb33), or a type index (a non-negative
// sleb33).
func (r *reader) blockType() error {
	b, err := r.byte("block type")
	if err != nil {
		return err
	}
	if b&0xc0 == 0x40 { // a one-byte negative number: 0x40 or a value type
		return nil
	}
	r.off--
	return r.skipLEB(5, "block type")
}

// importCounts counts the functions, tables, memories and globals the
// import section s imports (they come first in their index spaces).
func importCounts(s *section) ([4]uint64, error) {
	var counts [4]uint64
	r := reader{p: s.payload, base: s.payloadOffset()}
	n, err := r.u32("import count")
	if err != nil {
		return counts, err
	}
	for range n {
		for _, what := range []string{"import module name", "import name"} {
			l, err := r.u32(what)
			if err != nil {
				return counts, err
			}
			if _, err := r.bytes(int(l), what); err != nil {
				return counts, err
			}
		}
		kind, err := r.byte("import kind")
		if err != nil {
			return counts, err
		}
		switch kind {
		case 0x00: // function: type index
			err = r.skipU32s(1, "import type index")
		case 0x01: // table: reference type, limits
			if _, err = r.byte("import table type"); err == nil {
				err = r.skipLimits()
			}
		case 0x02: // memory: limits
			err = r.skipLimits()
		case 0x03: // global: value type, mutability
			_, err = r.bytes(2, "import global type")
		default:
			return counts, fmt.Errorf("import of unknown kind 0x%02x at offset %d", kind, r.base+r.off-1)
		}
		if err != nil {
			return counts, err
		}
		counts[kind]++
	}
	return counts, nil
}

// skipLimits reads the limits of a table or memory type.
func (r *reader) skipLimits() error {
	flags, err := r.byte("limits")
	if err != nil {
		return err
	}
	if flags > 3 {
		return fmt.Errorf("limits with unknown flags 0x%02x at offset %d", flags, r.base+r.off-1)
	}
	return r.skipU32s(1+int(flags&1), "limits")
}

// exportEntries reads the export section s: its count and the bytes of its
// entries. It fails if one of them is named interruptExport.
func exportEntries(s *section) (uint32, []byte, error) {
	r := reader{p: s.payload, base: s.payloadOffset()}
	n, err := r.u32("export count")
	if err != nil {
		return 0, nil, err
	}
	start := r.off
	for range n {
		l, err := r.u32("export name")
		if err != nil {
			return 0, nil, err
		}
		name, err := r.bytes(int(l), "export name")
		if err != nil {
			return 0, nil, err
		}
		if string(name) == interruptExport || string(name) == startExport {
			return 0, nil, fmt.Errorf("exports %q, a name the host reserves for itself", name)
		}
		if _, err := r.byte("export kind"); err != nil {
			return 0, nil, err
		}
		if err := r.skipU32s(1, "export index"); err != nil {
			return 0, nil, err
		}
	}
	if r.off != len(r.p) {
		return 0, nil, fmt.Errorf("export section: %d bytes after the last export at offset %d", len(r.p)-r.off, r.base+r.off)
	}
	return n, r.p[start:], nil
}

// wasmName appends s as a name (length, bytes).
func wasmName(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}
