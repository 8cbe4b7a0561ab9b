package wasm

import (
	"errors"
	"fmt"
)

// maxLocals bounds the locals a function body may declare (the limit
// browsers' engines set). wazero takes any number, and a body declaring
// 2^28 in a few bytes made it panic or exhaust the host's memory.
const maxLocals = 50_000

// errLimit is a module past a limit of ssrun's own (maxLocals) that
// wazero would take.
var errLimit = errors.New("over ssrun's limit")

// checkVectors checks the vectors nested in the sections wazero reads by
// their declared counts, allocating first: the element section's segments
// and the custom "name" section (readSections checks each section's own
// count, checkPoints a body's locals). Each must have no more entries
// than the bytes left, each taking one at least; a module that claims a
// billion entries in a few bytes is refused here, naming the place, rather
// than left to exhaust the host's memory in wazero.
func checkVectors(secs []section) error {
	for i := range secs {
		s := &secs[i]
		var err error
		switch {
		case s.id == 9:
			err = checkElements(s)
		case s.id == 0:
			err = checkNameSection(s)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// vec reads a vector's count, which must not exceed the bytes left.
func (r *reader) vec(what string) (uint32, error) {
	at := r.base + r.off
	n, err := r.u32(what)
	if err != nil {
		return 0, err
	}
	if uint64(n) > uint64(len(r.rest())) {
		return 0, fmt.Errorf("%s at offset %d claims %d entries in %d bytes: %w", what, at, n, len(r.rest()), errImplausible)
	}
	return n, nil
}

// name skips a name (a byte vector).
func (r *reader) name(what string) error {
	n, err := r.vec(what)
	if err != nil {
		return err
	}
	_, err = r.bytes(int(n), what)
	return err
}

// checkElements walks the element section's segments (their eight forms).
func checkElements(s *section) error {
	r := reader{p: s.payload, base: s.payloadOffset()}
	n, err := r.vec("element segment count")
	if err != nil {
		return err
	}
	for range n {
		flags, err := r.u32("element segment flags")
		if err != nil {
			return err
		}
		if flags > 7 {
			return fmt.Errorf("element segment flags %d at offset %d: want 0 to 7", flags, r.base+r.off)
		}
		if flags&2 != 0 && flags&1 == 0 { // an explicit table index
			if _, err := r.u32("element table index"); err != nil {
				return err
			}
		}
		if flags&1 == 0 { // active: an offset
			if err := r.constExpr(); err != nil {
				return err
			}
		}
		if flags&3 != 0 { // an element kind or a reference type
			if _, err := r.byte("element kind"); err != nil {
				return err
			}
		}
		count, err := r.vec("element count")
		if err != nil {
			return err
		}
		for range count {
			if flags&4 != 0 {
				err = r.constExpr()
			} else {
				_, err = r.u32("element function index")
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// constExpr skips a constant expression up to its end.
func (r *reader) constExpr() error {
	for {
		pos := r.off
		op, err := r.byte("constant expression")
		if err != nil {
			return err
		}
		switch op {
		case 0x0b: // end
			return nil
		case 0x41, 0x23, 0xd2: // i32.const, global.get, ref.func
			err = r.skipLEB(5, "constant")
		case 0x42: // i64.const
			err = r.skipLEB(10, "constant")
		case 0x43:
			_, err = r.bytes(4, "f32 constant")
		case 0x44:
			_, err = r.bytes(8, "f64 constant")
		case 0xd0: // ref.null t
			_, err = r.byte("reference type")
		case 0x6a, 0x6b, 0x6c, 0x7c, 0x7d, 0x7e: // extended constant arithmetic
		case 0xfd: // v128.const
			var sub uint32
			if sub, err = r.u32("SIMD opcode"); err == nil {
				if sub != 12 {
					return fmt.Errorf("opcode 0xfd %d at offset %d: not in a constant expression", sub, r.base+pos)
				}
				_, err = r.bytes(16, "v128 constant")
			}
		default:
			return fmt.Errorf("opcode 0x%02x at offset %d: not in a constant expression", op, r.base+pos)
		}
		if err != nil {
			return err
		}
	}
}

// checkNameSection walks a custom section named "name": its module name,
// function names and local names subsections (the ones wazero decodes);
// other custom sections and subsections are skipped whole.
func checkNameSection(s *section) error {
	r := reader{p: s.payload, base: s.payloadOffset()}
	n, err := r.vec("custom section name")
	if err != nil {
		return err
	}
	name, err := r.bytes(int(n), "custom section name")
	if err != nil || string(name) != "name" {
		return err
	}
	for len(r.rest()) > 0 {
		id, err := r.byte("name subsection id")
		if err != nil {
			return err
		}
		size, err := r.vec("name subsection size")
		if err != nil {
			return err
		}
		body, _ := r.bytes(int(size), "name subsection")
		sub := reader{p: body, base: r.base + r.off - len(body)}
		switch id {
		case 0: // the module's name
			err = sub.name("module name")
		case 1: // function names: a name map
			err = sub.nameMap("function names")
		case 2: // local names: an indirect name map
			var k uint32
			if k, err = sub.vec("local names"); err != nil {
				return err
			}
			for range k {
				if _, err = sub.u32("function index"); err == nil {
					err = sub.nameMap("local names of a function")
				}
				if err != nil {
					return err
				}
			}
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// nameMap skips a name map: a vector of (index, name).
func (r *reader) nameMap(what string) error {
	n, err := r.vec(what)
	if err != nil {
		return err
	}
	for range n {
		if _, err := r.u32(what + " index"); err != nil {
			return err
		}
		if err := r.name(what); err != nil {
			return err
		}
	}
	return nil
}
