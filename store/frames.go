package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// This file reads the frames of a data directory's files as they are, for
// the tests that attack recovery (broker/crash_test.go puts frames copied
// from the directory into values) and for looking at a directory by hand.

// FileFrames returns the bytes of every whole valid frame at the start of
// the journal segment or snapshot at path, as someone who can read the
// file could copy them. A file being written is read up to its first
// incomplete frame.
func FileFrames(path string) ([][]byte, error) {
	frames, _, err := fileFrames(path)
	if errors.Is(err, errTorn) {
		err = nil
	}
	return frames, err
}

// fileFrames returns the frames of the segment or snapshot at path and
// their offsets, up to the end of the file or to the frame error that
// stopped it.
func fileFrames(path string) (frames [][]byte, offs []int64, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	off, key := int64(magicLen), (*frameKey)(nil)
	if !strings.HasSuffix(path, ".snap") {
		h, err := parseSegmentHeader(b[:min(len(b), segmentHeaderLen)])
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", path, err)
		}
		off, key = h.size(), h.key()
	}
	fr := newFrameReader(bytes.NewReader(b[min(off, int64(len(b))):]), off, key)
	for {
		_, start, err := fr.next()
		if err == io.EOF {
			return frames, offs, nil
		}
		if err != nil {
			return frames, offs, fmt.Errorf("%s at offset %d: %w", path, start, err)
		}
		frames, offs = append(frames, b[start:fr.off]), append(offs, start)
	}
}
