package wasm

import (
	"bytes"
	"encoding/binary"
	"maps"
	"testing"
)

// dataImage returns what a module's data segments write into a fresh,
// zeroed memory: its non-zero bytes by address, and the number of
// segments. ok is false when mergeData cannot read its data section.
func dataImage(t testing.TB, src []byte) (img map[uint32]byte, segs int, ok bool) {
	t.Helper()
	var payload []byte
	for i := 8; i < len(src); {
		id := src[i]
		size, n := binary.Uvarint(src[i+1:])
		i += 1 + n
		if id == 11 {
			payload = src[i : i+int(size)]
		}
		i += int(size)
	}
	ds, err := parseActiveData(payload)
	if err != nil || len(ds) == 0 {
		return nil, 0, false
	}
	img = map[uint32]byte{}
	for _, d := range ds {
		for k, b := range d.data {
			if b != 0 {
				img[d.offset+uint32(k)] = b
			} else {
				delete(img, d.offset+uint32(k))
			}
		}
	}
	return img, len(ds), true
}

// module returns a module of the given sections (id, payload) after the
// header.
func module(sections ...[]byte) []byte {
	m := []byte("\x00asm\x01\x00\x00\x00")
	for _, s := range sections {
		m = append(m, s[0])
		m = binary.AppendUvarint(m, uint64(len(s)-1))
		m = append(m, s[1:]...)
	}
	return m
}

// dataSection returns a data section (id first) of active segments in
// memory 0 at the given offsets.
func dataSection(segs ...dataSegment) []byte {
	p := []byte{11}
	p = binary.AppendUvarint(p, uint64(len(segs)))
	for _, s := range segs {
		p = append(p, 0, 0x41)
		p = appendSLEB(p, int64(int32(s.offset)))
		p = append(p, 0x0b)
		p = binary.AppendUvarint(p, uint64(len(s.data)))
		p = append(p, s.data...)
	}
	return p
}

// checkMerge checks mergeData's promise on src: the same memory image, in
// fewer segments, and a module grown by at most its size plus 1 MiB.
func checkMerge(t testing.TB, src []byte) (out []byte) {
	t.Helper()
	out = mergeData(src)
	if bytes.Equal(out, src) {
		return out
	}
	a, an, ok := dataImage(t, src)
	if !ok {
		t.Fatalf("mergeData changed a module whose data it cannot merge")
	}
	b, bn, ok := dataImage(t, out)
	if !ok || !maps.Equal(a, b) {
		t.Fatalf("merged data differs: %d vs %d non-zero bytes", len(a), len(b))
	}
	if bn >= an {
		t.Fatalf("%d segments merged into %d", an, bn)
	}
	if len(out) > 2*len(src)+1<<20+16 {
		t.Fatalf("module grew from %d to %d bytes", len(src), len(out))
	}
	return out
}

func TestMergeData(t *testing.T) {
	seg := func(off uint32, s string) dataSegment { return dataSegment{offset: off, data: []byte(s)} }
	code := []byte{10, 1, 2, 0, 0x0b} // a code section before the data
	custom := []byte{0, 4, 'n', 'a', 'm', 'e'}
	for _, tc := range []struct {
		name   string
		src    []byte
		merged int // segments after, 0: unchanged
	}{
		{"adjacent and gaps", module(code, dataSection(seg(16, "ab"), seg(18, "cd"), seg(100, "ef"), seg(100+2+mergeGap+1, "far")), custom), 2},
		{"negative offset (high memory)", module(dataSection(seg(0xffff0000, "a"), seg(0xffff0010, "b"))), 1},
		{"one segment", module(dataSection(seg(8, "a"))), 0},
		{"out of order", module(dataSection(seg(100, "a"), seg(8, "b"))), 1},
		{"overlapping", module(dataSection(seg(8, "abcd"), seg(10, "x"))), 0},
		{"data count section", module([]byte{12, 2}, dataSection(seg(8, "a"), seg(9, "b"))), 0},
		{"no data", module(code), 0},
		{"not wasm", []byte("plain text, no module"), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := checkMerge(t, tc.src)
			if tc.merged == 0 {
				if !bytes.Equal(out, tc.src) {
					t.Fatal("changed")
				}
				return
			}
			if _, n, _ := dataImage(t, out); n != tc.merged {
				t.Fatalf("%d segments after merging, want %d", n, tc.merged)
			}
			if !bytes.HasSuffix(out, custom) && bytes.HasSuffix(tc.src, custom) {
				t.Fatal("the sections after the data section were not kept")
			}
		})
	}
}

// A Go guest's some 30,000 data segments become a few hundred, the memory
// they write unchanged (the guest's tests run the merged module).
func TestMergeDataGoGuest(t *testing.T) {
	src := guest(t, "rule")
	_, before, ok := dataImage(t, src)
	if !ok {
		t.Fatal("the Go guest's data segments cannot be merged")
	}
	_, after, _ := dataImage(t, checkMerge(t, src))
	t.Logf("%d data segments merged into %d", before, after)
	if after*10 > before {
		t.Fatalf("%d data segments merged into %d, want at most a tenth", before, after)
	}
}

func FuzzMergeData(f *testing.F) {
	seg := func(off uint32, s string) dataSegment { return dataSegment{offset: off, data: []byte(s)} }
	f.Add(module(dataSection(seg(16, "ab"), seg(18, "cd"), seg(100, "ef"), seg(5000, "far"))))
	f.Add(module(dataSection(seg(0xffff0000, "a"), seg(0xffff0010, "b"))))
	f.Add(module(dataSection(seg(100, "a"), seg(8, "b"))))
	f.Add(module([]byte{12, 2}, dataSection(seg(8, "a"), seg(9, "b"))))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x0b\x05\x02\x00\x41\x00\x0b"))
	f.Fuzz(func(t *testing.T, src []byte) {
		checkMerge(t, src)
	})
}
