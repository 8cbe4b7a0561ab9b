package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// logHandler returns the handler for --log-format: "text" (slog's
// key=value lines, the default) or "json" (one JSON object per line, for
// log collectors).
func logHandler(w io.Writer, format string, level slog.Leveler) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return &linesHandler{Handler: slog.NewTextHandler(w, opts), w: w, mu: &sync.Mutex{}}, nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("want text or json")
}

// linesHandler is slog's text handler for people: a message of several
// lines (a Go panic's stack trace that a rule logged) is written as lines,
// not as one line full of \n and \t. The record carries the first line;
// the others follow it, each indented with a tab, control characters
// other than tabs escaped as Go escapes them, so that no line a rule logs
// can pass for a record of its own.
type linesHandler struct {
	slog.Handler
	w  io.Writer
	mu *sync.Mutex // shared by the handlers derived from one: a record and its lines stay together
}

// Handle implements slog.Handler.
func (h *linesHandler) Handle(ctx context.Context, r slog.Record) error {
	first, rest, multi := strings.Cut(r.Message, "\n")
	h.mu.Lock()
	defer h.mu.Unlock()
	if !multi {
		return h.Handler.Handle(ctx, r)
	}
	head := slog.NewRecord(r.Time, r.Level, first, r.PC)
	r.Attrs(func(a slog.Attr) bool { head.AddAttrs(a); return true })
	if err := h.Handler.Handle(ctx, head); err != nil {
		return err
	}
	var b strings.Builder
	for line := range strings.Lines(rest) {
		b.WriteString("\t")
		b.WriteString(escapeControls(strings.TrimSuffix(line, "\n")))
		b.WriteString("\n")
	}
	_, err := io.WriteString(h.w, b.String())
	return err
}

// WithAttrs implements slog.Handler.
func (h *linesHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &linesHandler{Handler: h.Handler.WithAttrs(attrs), w: h.w, mu: h.mu}
}

// WithGroup implements slog.Handler.
func (h *linesHandler) WithGroup(name string) slog.Handler {
	return &linesHandler{Handler: h.Handler.WithGroup(name), w: h.w, mu: h.mu}
}

// escapeControls escapes s's control characters but tabs, and invalid
// UTF-8, as strconv.Quote does, leaving the rest as it is.
func escapeControls(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case r != '\t' && (unicode.IsControl(r) || r == 0x2028 || r == 0x2029):
			q := strconv.QuoteRune(r)
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}
