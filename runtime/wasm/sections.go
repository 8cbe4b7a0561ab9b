package wasm

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// A module binary's sections, as mergeData and instrument read them: each
// rewrites a few sections and keeps every other byte for byte.

// section is one section of a module binary: src[start:end] is all of it
// (id, size, payload), payload its contents.
type section struct {
	id         byte
	start, end int
	payload    []byte
}

// payloadOffset is where s's payload starts in the module binary.
func (s section) payloadOffset() int { return s.end - len(s.payload) }

var errNotWasm = errors.New("not a WebAssembly binary (no \\0asm version 1 header)")

// readSections splits a module binary into its sections. It checks only
// the header, that each section's size fits the binary, and plausibleCount.
func readSections(src []byte) ([]section, error) {
	if len(src) < 8 || string(src[:8]) != "\x00asm\x01\x00\x00\x00" {
		return nil, errNotWasm
	}
	var secs []section
	for i := 8; i < len(src); {
		start := i
		id := src[i]
		size, n := binary.Uvarint(src[i+1:])
		if n <= 0 || n > 5 || size > uint64(len(src)-(i+1+n)) {
			return nil, fmt.Errorf("section %d at offset %d: size runs past the end of the binary", id, start)
		}
		i += 1 + n
		secs = append(secs, section{id: id, start: start, end: i + int(size), payload: src[i : i+int(size)]})
		if err := plausibleCount(&secs[len(secs)-1]); err != nil {
			return nil, err
		}
		i += int(size)
	}
	return secs, nil
}

// appendSection appends a section of id with payload p.
func appendSection(b []byte, id byte, p []byte) []byte {
	b = append(b, id)
	b = binary.AppendUvarint(b, uint64(len(p)))
	return append(b, p...)
}

// sectionRank is the position of a known section id in the order the
// binary format requires (the tag section, 13, goes between memory and
// global; data count, 12, between element and code); custom sections (0)
// and unknown ids rank -1.
func sectionRank(id byte) int {
	switch {
	case id >= 1 && id <= 5:
		return int(id) * 2
	case id == 13:
		return 11
	case id >= 6 && id <= 9:
		return int(id) * 2
	case id == 12:
		return 19
	case id == 10 || id == 11:
		return int(id) * 2
	}
	return -1
}

// errImplausible is a vector section with more entries than bytes.
var errImplausible = errors.New("more entries than bytes")

// plausibleCount checks that a vector section (all but custom, start and
// data count) has no more entries than bytes, each taking one at least.
// wazero allocates its vectors by their count before it reads them: a
// count of a billion in a few bytes would make it exhaust the host's
// memory (FuzzInstrument found this with the import section). readSections
// refuses such a section before any later one can fail differently, so
// that instrument, which runs first, keeps such a module from wazero.
func plausibleCount(s *section) error {
	if s.id == 0 || s.id == 8 || s.id == 12 {
		return nil
	}
	r := reader{p: s.payload, base: s.payloadOffset()}
	n, err := r.u32(fmt.Sprintf("section %d count", s.id))
	if err != nil {
		return err
	}
	if uint64(n) > uint64(len(r.rest())) {
		return fmt.Errorf("section %d at offset %d claims %d entries in %d bytes: %w", s.id, s.start, n, len(r.rest()), errImplausible)
	}
	return nil
}
