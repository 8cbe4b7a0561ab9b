package wasm

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
)

// mergeGap is the longest run of zero bytes between two data segments that
// mergeData fills to join them.
const mergeGap = 4096

// mergeData returns src with the active data segments of its memory joined
// into fewer, longer ones, the gaps between them (at most mergeGap bytes)
// filled with zeros: what instantiating the module writes into its fresh,
// zeroed memory is unchanged. A Go guest has some 30,000 segments (its
// linker splits the data at runs of zeros), and the runtime evaluates and
// copies each one at every instantiation; joined, they are a few hundred.
//
// Only a module whose data segments are all active, in memory 0, at
// constant offsets (i32.const), without overlap (so the order they are
// written in makes no difference: they are sorted), and which has no data
// count section (so no instruction names a segment), is changed; any other, valid or not, is returned as it is, and the compiler
// judges it.
func mergeData(src []byte) []byte {
	out, err := mergeDataErr(src)
	if err != nil {
		return src
	}
	return out
}

var errNoMerge = errors.New("data segments left as they are")

type dataSegment struct {
	offset uint32
	data   []byte
}

func mergeDataErr(src []byte) ([]byte, error) {
	secs, err := readSections(src)
	if err != nil {
		return nil, errNoMerge
	}
	var data section // the data section
	var payload []byte
	for _, s := range secs {
		switch s.id {
		case 12: // data count: instructions may name segments
			return nil, errNoMerge
		case 11:
			if payload != nil {
				return nil, errNoMerge
			}
			data, payload = s, s.payload
		}
	}
	if payload == nil {
		return nil, errNoMerge
	}
	segs, err := parseActiveData(payload)
	if err != nil || len(segs) < 2 {
		return nil, errNoMerge
	}
	// Segments that do not overlap write the same bytes in any order.
	slices.SortStableFunc(segs, func(a, b dataSegment) int { return cmp.Compare(a.offset, b.offset) })
	merged := []dataSegment{{offset: segs[0].offset, data: append([]byte(nil), segs[0].data...)}}
	zeros := 0 // filled in: at most the section's size plus 1 MiB
	for _, s := range segs[1:] {
		last := &merged[len(merged)-1]
		end := uint64(last.offset) + uint64(len(last.data))
		if uint64(s.offset) < end {
			return nil, errNoMerge // overlapping
		}
		if gap := uint64(s.offset) - end; gap <= mergeGap && zeros+int(gap) <= len(payload)+1<<20 {
			zeros += int(gap)
			last.data = append(last.data, make([]byte, gap)...)
			last.data = append(last.data, s.data...)
			continue
		}
		merged = append(merged, dataSegment{offset: s.offset, data: append([]byte(nil), s.data...)})
	}
	if len(merged) == len(segs) {
		return nil, errNoMerge
	}
	var sec []byte
	sec = binary.AppendUvarint(sec, uint64(len(merged)))
	for _, s := range merged {
		sec = append(sec, 0, 0x41) // active, memory 0; i32.const
		sec = appendSLEB(sec, int64(int32(s.offset)))
		sec = append(sec, 0x0b) // end
		sec = binary.AppendUvarint(sec, uint64(len(s.data)))
		sec = append(sec, s.data...)
	}
	out := make([]byte, 0, len(src)-len(payload)+len(sec)+5)
	out = append(out, src[:data.start]...)
	out = appendSection(out, 11, sec)
	out = append(out, src[data.end:]...)
	return out, nil
}

// parseActiveData reads a data section's segments; any segment that is not
// active in memory 0 at an i32.const offset is an error.
func parseActiveData(p []byte) ([]dataSegment, error) {
	count, n := binary.Uvarint(p)
	if n <= 0 || n > 5 || count > uint64(len(p)) {
		return nil, errNoMerge
	}
	p = p[n:]
	segs := make([]dataSegment, 0, count)
	for range count {
		if len(p) < 2 || p[0] != 0 || p[1] != 0x41 {
			return nil, errNoMerge
		}
		p = p[2:]
		off, n := readSLEB32(p)
		if n == 0 || len(p) <= n || p[n] != 0x0b {
			return nil, errNoMerge
		}
		p = p[n+1:]
		size, n := binary.Uvarint(p)
		if n <= 0 || n > 5 || size > uint64(len(p)-n) {
			return nil, errNoMerge
		}
		p = p[n:]
		segs = append(segs, dataSegment{offset: uint32(int32(off)), data: p[:size]})
		p = p[size:]
	}
	if len(p) != 0 {
		return nil, errNoMerge
	}
	return segs, nil
}

// readSLEB32 reads a signed LEB128 number of at most 5 bytes that fits an
// int32, and returns it and its length (0: none).
func readSLEB32(p []byte) (int64, int) {
	var v int64
	var shift uint
	for i := 0; i < len(p) && i < 5; i++ {
		b := p[i]
		v |= int64(b&0x7f) << shift
		shift += 7
		if b&0x80 == 0 {
			if b&0x40 != 0 {
				v |= -1 << shift
			}
			if v < -1<<31 || v >= 1<<31 {
				return 0, 0
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// appendSLEB appends v as signed LEB128.
func appendSLEB(b []byte, v int64) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && c&0x40 == 0) || (v == -1 && c&0x40 != 0) {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}
