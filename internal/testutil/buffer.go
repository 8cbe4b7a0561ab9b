package testutil

import (
	"bytes"
	"io"
	"strings"
	"sync"
	"testing"
)

// Buffer collects what is written to it, such as a logger's or a command's
// output, and may be read while writers still write. The zero value is
// empty and ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// LogWriter returns a writer that passes each write (a log line) to tb.Log,
// without its trailing newline, until the test ends; later writes are
// dropped, since tb.Log panics after the test ended (a goroutine may still
// log while it stops).
func LogWriter(tb testing.TB) io.Writer {
	w := &logWriter{tb: tb}
	tb.Cleanup(func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.ended = true
	})
	return w
}

type logWriter struct {
	mu    sync.Mutex
	tb    testing.TB
	ended bool
}

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.tb.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}
