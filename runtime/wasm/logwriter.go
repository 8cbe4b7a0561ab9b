package wasm

import (
	"bytes"
	"strings"
)

// maxLine is the longest log line a lineWriter emits; longer lines are
// emitted in pieces of this size.
const maxLine = 16 << 10

// lineWriter turns a guest's stdout or stderr into log lines: one emit per
// line, without the newline. Flush emits a pending partial line. The pieces
// do not depend on how the output was split into writes. Only the
// goroutine running the instance uses it.
type lineWriter struct {
	emit func(line string)
	buf  []byte
	// sawOOM is set when a line reports that the guest ran out of memory
	// (Go's runtime prints "fatal error: out of memory").
	sawOOM bool
}

// Write implements io.Writer; it never fails.
func (w *lineWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			w.buf = append(w.buf, p...)
			break
		}
		w.buf = append(w.buf, p[:i]...)
		p = p[i+1:]
		if len(w.buf) == 0 {
			w.line(nil) // an empty line
		} else {
			w.Flush()
		}
	}
	w.cut()
	return n, nil
}

// cut emits full pieces of an overlong pending line, keeping 1..maxLine
// bytes.
func (w *lineWriter) cut() {
	if len(w.buf) <= maxLine {
		return
	}
	b := w.buf
	for len(b) > maxLine {
		w.line(b[:maxLine])
		b = b[maxLine:]
	}
	w.buf = append(w.buf[:0], b...)
}

// Flush emits the pending partial line, if any.
func (w *lineWriter) Flush() {
	w.cut()
	if len(w.buf) > 0 {
		w.line(w.buf)
		w.buf = w.buf[:0]
	}
}

func (w *lineWriter) line(b []byte) {
	s := string(b)
	if strings.Contains(s, "out of memory") && (strings.HasPrefix(s, "fatal error:") || strings.HasPrefix(s, "runtime:")) {
		w.sawOOM = true
	}
	w.emit(s)
}
