package store

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"strings"

	"github.com/ssrun/ssrun/protocol/hlc"
)

// This file is the byte format of the store's files (persist.go): the
// records, the frames around them and the journal segment's header.
//
// A snapshot is its magic followed by frames:
//
//	frame   = length crc payload
//	length  = uint32 little endian: len(payload), 1..maxRecord
//	crc     = uint32 little endian: CRC-32C (Castagnoli) of length || payload
//
// A journal segment (format 2) is a header followed by keyed frames, whose
// header has a checksum of its own, keyed by the segment and the frame's
// place in it:
//
//	segment = "SSRJRNL2" seq nonce hcrc  keyed-frame*
//	seq     = uint64 little endian: the segment's number (its file name's)
//	nonce   = 8 random bytes, drawn when the segment is created, never shown
//	hcrc    = uint32 little endian: CRC-32C of the 24 bytes before it
//
//	keyed-frame = length fcrc pcrc payload
//	length      = uint32 little endian: len(payload), 1..maxRecord
//	pcrc        = uint32 little endian: CRC-32C of payload
//	fcrc        = uint32 little endian: CRC-32C of nonce || offset || length || pcrc
//	              (offset: the frame's, in the file, uint64 little endian)
//
// so that recovery can trust a frame's length before it has read its
// payload, and no frame is valid anywhere but at the place it was written:
// bytes a client put in a value cannot pass for a record (persist.go, "torn
// tails"). Segments of format 1 ("SSRJRNL1", written before format 2) are
// the magic followed by snapshot frames; they are read, never appended to.
//
// The payload of both kinds of frame:
//
//	payload = kind fields...         (uvarint and length-prefixed bytes)
//
//	SET    (1): key, value, version, deadline (varint unix ns, 0 = none),
//	            fenced (1 byte 0/1) [, fence token]
//	DELETE (2): key, version (the deletion's tick)
//	CLOCK  (3): the clock's high-water mark (first record of a snapshot)
//	END    (4): number of SET records (last record of a snapshot)
//
// where key and value are uvarint length + bytes, and an HLC is wall
// (uvarint ms), counter (uvarint), node (uvarint length + bytes). The CRCs
// cover the length too, so a damaged length is caught like damaged data.
// Decoding is strict: an unknown kind, a field running past the payload,
// trailing bytes or a value that is not a valid HLC are all errors.

// Record kinds.
const (
	recSet    byte = 1
	recDelete byte = 2
	recClock  byte = 3
	recEnd    byte = 4
)

// frameHeader is the size of a snapshot frame's (and a format 1 journal
// frame's) length and CRC; keyedFrameHeader, of a keyed frame's length and
// two CRCs.
const (
	frameHeader      = 8
	keyedFrameHeader = 12
)

// maxRecord bounds a payload: a key and a value each fit in one MQTT packet,
// plus the fixed fields. A larger length is damage, never a record.
const maxRecord = 2*MaxRequest + 1024

// File magics: the first bytes of every journal segment and snapshot. The
// trailing digit is the format version.
const (
	segmentMagic     = "SSRJRNL2"
	segmentMagicV1   = "SSRJRNL1"
	snapshotMagic    = "SSRSNAP1"
	magicLen         = 8
	segmentHeaderLen = magicLen + 8 + 8 + 4 // magic, seq, nonce, hcrc
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errRecord wraps every decoding error of a payload.
var errRecord = errors.New("malformed record")

// record is one decoded payload. Only the fields of its kind are set.
type record struct {
	kind    byte
	key     string
	value   []byte
	version hlc.HLC // SET: the entry's; DELETE: the deletion's; CLOCK: the high-water mark
	expires int64   // SET: deadline in unix ns, 0 = none
	fence   hlc.HLC // SET, when fenced
	fenced  bool
	count   uint64 // END
}

// appendFrame appends r, in a snapshot frame, to dst.
func appendFrame(dst []byte, r *record) []byte {
	start := len(dst)
	dst = appendPayload(append(dst, make([]byte, frameHeader)...), r)
	payload := dst[start+frameHeader:]
	binary.LittleEndian.PutUint32(dst[start:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+4:], frameCRC(dst[start:start+4], payload))
	return dst
}

// appendKeyedFrame appends r, in a keyed frame for offset off of the
// segment of key, to dst.
func appendKeyedFrame(dst []byte, r *record, key *frameKey, off int64) []byte {
	start := len(dst)
	dst = appendPayload(append(dst, make([]byte, keyedFrameHeader)...), r)
	h := dst[start : start+keyedFrameHeader]
	payload := dst[start+keyedFrameHeader:]
	binary.LittleEndian.PutUint32(h, uint32(len(payload)))
	binary.LittleEndian.PutUint32(h[8:], crc32.Checksum(payload, castagnoli))
	binary.LittleEndian.PutUint32(h[4:], key.sum(off, h))
	return dst
}

// frameKey computes the fcrc of the keyed frames of one segment. It is
// not safe for concurrent use: it holds the bytes summed, since a buffer
// on the stack would escape to the heap through hash/crc32, once a frame.
type frameKey struct {
	b [24]byte // nonce, offset, length, pcrc
}

func newFrameKey(nonce *[8]byte) *frameKey {
	k := &frameKey{}
	copy(k.b[:8], nonce[:])
	return k
}

// sum is the fcrc of keyed frame header h at offset off.
func (k *frameKey) sum(off int64, h []byte) uint32 {
	binary.LittleEndian.PutUint64(k.b[8:], uint64(off))
	copy(k.b[16:20], h[:4])
	copy(k.b[20:24], h[8:12])
	return crc32.Checksum(k.b[:], castagnoli)
}

// appendPayload appends r's kind and fields.
func appendPayload(dst []byte, r *record) []byte {
	dst = append(dst, r.kind)
	switch r.kind {
	case recSet:
		dst = appendBytes(dst, r.key)
		dst = appendBytes(dst, r.value)
		dst = appendHLC(dst, r.version)
		dst = binary.AppendVarint(dst, r.expires)
		if r.fenced {
			dst = append(dst, 1)
			dst = appendHLC(dst, r.fence)
		} else {
			dst = append(dst, 0)
		}
	case recDelete:
		dst = appendBytes(dst, r.key)
		dst = appendHLC(dst, r.version)
	case recClock:
		dst = appendHLC(dst, r.version)
	case recEnd:
		dst = binary.AppendUvarint(dst, r.count)
	}
	return dst
}

// segmentHeader is what a journal segment's header says.
type segmentHeader struct {
	version int    // 1 or 2
	seq     uint64 // format 2
	nonce   [8]byte
}

// key is the key of the segment's frames, nil for format 1.
func (h *segmentHeader) key() *frameKey {
	if h.version == 1 {
		return nil
	}
	return newFrameKey(&h.nonce)
}

// size is the length of the header in the file.
func (h *segmentHeader) size() int64 {
	if h.version == 1 {
		return magicLen
	}
	return segmentHeaderLen
}

// appendSegmentHeader appends the header of a format 2 segment.
func appendSegmentHeader(dst []byte, seq uint64, nonce *[8]byte) []byte {
	start := len(dst)
	dst = append(dst, segmentMagic...)
	dst = binary.LittleEndian.AppendUint64(dst, seq)
	dst = append(dst, nonce[:]...)
	return binary.LittleEndian.AppendUint32(dst, crc32.Checksum(dst[start:], castagnoli))
}

// Segment header errors.
var (
	errShortSegment = errors.New("journal segment shorter than its header")
	errNotSegment   = errors.New("not an ssrun journal segment")
	errBadSegment   = errors.New("damaged journal segment header (bad checksum)")
)

// parseSegmentHeader reads the header at the start of b, which holds the
// file's first segmentHeaderLen bytes or all of it if shorter.
func parseSegmentHeader(b []byte) (segmentHeader, error) {
	switch {
	case len(b) < magicLen:
		return segmentHeader{}, errShortSegment
	case string(b[:magicLen]) == segmentMagicV1:
		return segmentHeader{version: 1}, nil
	case string(b[:magicLen]) != segmentMagic:
		return segmentHeader{}, fmt.Errorf("%w (no %q header)", errNotSegment, segmentMagic)
	case len(b) < segmentHeaderLen:
		return segmentHeader{}, errShortSegment
	case crc32.Checksum(b[:segmentHeaderLen-4], castagnoli) != binary.LittleEndian.Uint32(b[segmentHeaderLen-4:]):
		return segmentHeader{}, errBadSegment
	}
	h := segmentHeader{version: 2, seq: binary.LittleEndian.Uint64(b[magicLen:])}
	copy(h.nonce[:], b[magicLen+8:])
	return h, nil
}

func frameCRC(length, payload []byte) uint32 {
	return crc32.Update(crc32.Checksum(length, castagnoli), castagnoli, payload)
}

func appendBytes[T string | []byte](dst []byte, b T) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

func appendHLC(dst []byte, h hlc.HLC) []byte {
	dst = binary.AppendUvarint(dst, uint64(h.Wall))
	dst = binary.AppendUvarint(dst, h.Counter)
	return appendBytes(dst, h.Node)
}

// decodeRecord decodes one payload. Strings and values are copied: p may be
// reused.
func decodeRecord(p []byte) (record, error) {
	d := decoder{b: p}
	r := record{kind: d.byte()}
	switch r.kind {
	case recSet:
		r.key = string(d.bytes())
		r.value = append([]byte{}, d.bytes()...)
		r.version = d.hlc()
		r.expires = d.varint()
		switch d.byte() {
		case 0:
		case 1:
			r.fenced, r.fence = true, d.hlc()
		default:
			d.fail("fence flag")
		}
		if d.err == nil && r.key == "" {
			d.fail("empty key")
		}
	case recDelete:
		r.key = string(d.bytes())
		r.version = d.hlc()
		if d.err == nil && r.key == "" {
			d.fail("empty key")
		}
	case recClock:
		r.version = d.hlc()
	case recEnd:
		r.count = d.uvarint()
	default:
		if d.err == nil {
			d.fail(fmt.Sprintf("unknown kind %d", r.kind))
		}
	}
	if d.err == nil && len(d.b) > 0 {
		d.fail(fmt.Sprintf("%d bytes after the last field", len(d.b)))
	}
	if d.err != nil {
		return record{}, d.err
	}
	return r, nil
}

// decoder reads fields; the first failure sticks and later reads return
// zero values.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", errRecord, what)
	}
	d.b = nil
}

func (d *decoder) byte() byte {
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// uvarint and varint accept only the shortest encoding, so that a record
// has exactly one valid form.
func (d *decoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	var buf [binary.MaxVarintLen64]byte
	if n <= 0 || n != binary.PutUvarint(buf[:], v) {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	v, n := binary.Varint(d.b)
	var buf [binary.MaxVarintLen64]byte
	if n <= 0 || n != binary.PutVarint(buf[:], v) {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) bytes() []byte {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("length past the end")
		return nil
	}
	b := d.b[:n]
	d.b = d.b[n:]
	return b
}

// hlc reads a version or token; it must be one the clock could have issued
// or accepted: wall in int64, counter at most hlc.MaxCounter, a non-empty
// node without ':'.
func (d *decoder) hlc() hlc.HLC {
	wall, counter, node := d.uvarint(), d.uvarint(), d.bytes()
	if d.err != nil {
		return hlc.HLC{}
	}
	if wall > 1<<63-1 || counter > hlc.MaxCounter || len(node) == 0 || strings.IndexByte(string(node), ':') >= 0 {
		d.fail("invalid HLC")
		return hlc.HLC{}
	}
	return hlc.HLC{Wall: int64(wall), Counter: counter, Node: string(node)}
}

// Frame reading errors.
var (
	// errTorn: the file ends inside a frame (a write cut short).
	errTorn = errors.New("record runs past the end of the file")
	// errBadFrame: a length out of range or a CRC that does not match.
	errBadFrame = errors.New("damaged record (bad length or checksum)")
	// errBadHeader: a keyed frame whose header does not match its fcrc.
	errBadHeader = errors.New("damaged record header (bad length or checksum)")
)

// frameReader reads frames from a file body, tracking offsets.
type frameReader struct {
	r     *bufio.Reader
	off   int64     // offset of the next frame in the file
	key   *frameKey // keyed frames of the segment of key; nil: snapshot frames
	hsize int       // frameHeader or keyedFrameHeader
	h     [keyedFrameHeader]byte
	buf   []byte
	// badEnd is where the frame of the last errBadFrame of a keyed reader
	// ends, as its checked header says.
	badEnd int64
}

// newFrameReader reads snapshot frames (key nil) or the keyed frames of
// the segment of key from r, at offset off of its file.
func newFrameReader(r io.Reader, off int64, key *frameKey) *frameReader {
	fr := &frameReader{r: bufio.NewReaderSize(r, 1<<16), off: off, key: key, hsize: frameHeader}
	if key != nil {
		fr.hsize = keyedFrameHeader
	}
	return fr
}

// next returns the next frame's payload (valid until the next call) and its
// offset. At a clean end of file it returns io.EOF; otherwise, with start
// the offset of the bad frame, errTorn (a keyed reader returns it only for
// a header that is cut short or checks), errBadHeader (keyed only) or
// errBadFrame.
func (fr *frameReader) next() (payload []byte, start int64, err error) {
	start = fr.off
	h := fr.h[:fr.hsize]
	n, err := io.ReadFull(fr.r, h)
	switch {
	case err == io.EOF:
		return nil, start, io.EOF
	case errors.Is(err, io.ErrUnexpectedEOF):
		return nil, start, errTorn
	case err != nil:
		return nil, start, err
	}
	size := binary.LittleEndian.Uint32(h[:4])
	switch {
	case fr.key != nil && (fr.key.sum(start, h) != binary.LittleEndian.Uint32(h[4:]) || size == 0 || size > maxRecord):
		return nil, start, errBadHeader
	case size == 0 || size > maxRecord:
		return nil, start, errBadFrame
	}
	p, err := fr.read(int(size))
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || err == io.EOF {
			return nil, start, errTorn
		}
		return nil, start, err
	}
	if fr.key != nil {
		if crc32.Checksum(p, castagnoli) != binary.LittleEndian.Uint32(h[8:]) {
			fr.badEnd = start + int64(n) + int64(size)
			return nil, start, errBadFrame
		}
	} else if frameCRC(h[:4], p) != binary.LittleEndian.Uint32(h[4:]) {
		return nil, start, errBadFrame
	}
	fr.off += int64(n) + int64(size)
	if cap(fr.buf) > 1<<20 {
		fr.buf = nil // p stays valid; the next small record gets a small buffer
	}
	return p, start, nil
}

// read reads n bytes into the frame buffer. Beyond 64 KiB the buffer grows
// with the data read, so a damaged length near maxRecord costs no more
// memory than the file holds.
func (fr *frameReader) read(n int) ([]byte, error) {
	const chunk = 64 << 10
	if n <= chunk {
		if cap(fr.buf) < n {
			fr.buf = make([]byte, chunk)
		}
		p := fr.buf[:n]
		_, err := io.ReadFull(fr.r, p)
		return p, err
	}
	p := fr.buf[:0]
	for len(p) < n {
		if len(p) == cap(p) { // double, from 64 KiB, up to n
			p = append(p, make([]byte, min(max(cap(p), chunk), n-len(p)))...)[:len(p)]
		}
		m, err := io.ReadFull(fr.r, p[len(p):min(cap(p), n)])
		p = p[:len(p)+m]
		if err != nil {
			if len(p) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
	fr.buf = p
	return p, nil
}

// nextValidFrame returns the offset in b of the first complete snapshot
// frame with a matching CRC, or -1. It is how recovery of a format 1
// segment tells a torn tail (nothing valid after the damage) from damage in
// the middle of the data.
func nextValidFrame(b []byte) int {
	for i := 0; i+frameHeader < len(b); i++ {
		size := binary.LittleEndian.Uint32(b[i:])
		if size == 0 || size > maxRecord || uint64(i)+frameHeader+uint64(size) > uint64(len(b)) ||
			b[i+frameHeader] < recSet || b[i+frameHeader] > recEnd {
			continue
		}
		p := b[i+frameHeader : i+frameHeader+int(size)]
		if frameCRC(b[i:i+4], p) == binary.LittleEndian.Uint32(b[i+4:]) {
			return i
		}
	}
	return -1
}

// nextKeyedFrame returns the offset in b, which starts at offset base of
// the segment of key, of the first complete keyed frame valid at its
// place, or -1. Bytes copied from any frame of any file, or made up
// without the nonce, are not one (but for chance: 2^-32 each).
func nextKeyedFrame(b []byte, base int64, key *frameKey) int {
	for i := 0; i+keyedFrameHeader < len(b); i++ {
		size := binary.LittleEndian.Uint32(b[i:])
		if size == 0 || size > maxRecord || uint64(i)+keyedFrameHeader+uint64(size) > uint64(len(b)) ||
			key.sum(base+int64(i), b[i:]) != binary.LittleEndian.Uint32(b[i+4:]) {
			continue
		}
		p := b[i+keyedFrameHeader : i+keyedFrameHeader+int(size)]
		if crc32.Checksum(p, castagnoli) == binary.LittleEndian.Uint32(b[i+8:]) {
			return i
		}
	}
	return -1
}
