package plugin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/hashicorp/go-hclog"

	"github.com/ssrun/ssrun/abi"
)

// hclogger routes go-plugin's hclog output to slog: the host side's own
// diagnostics, never the plugin's output (see rawStderr). go-plugin's
// informational lines (process started, exited) are demoted to debug: the
// runtime logs the lifecycle itself.
type hclogger struct {
	l       *slog.Logger
	name    string
	implied []any
}

func newHCLogger(l *slog.Logger) hclog.Logger { return &hclogger{l: l} }

var levels = [...]struct {
	h hclog.Level
	s slog.Level
}{
	{hclog.Trace, slog.LevelDebug - 4},
	{hclog.Debug, slog.LevelDebug},
	{hclog.Info, slog.LevelDebug},
	{hclog.Warn, slog.LevelWarn},
	{hclog.Error, slog.LevelError},
}

func toSlog(l hclog.Level) slog.Level {
	for _, m := range levels {
		if m.h == l {
			return m.s
		}
	}
	return slog.LevelInfo // NoLevel
}

func (a *hclogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.Off {
		return
	}
	lv := toSlog(level)
	ctx := context.Background()
	if !a.l.Enabled(ctx, lv) {
		return
	}
	attrs := make([]any, 0, len(a.implied)+len(args)+2)
	if a.name != "" {
		attrs = append(attrs, "logger", a.name)
	}
	attrs = append(append(attrs, a.implied...), args...)
	a.l.Log(ctx, lv, msg, attrs...)
}

func (a *hclogger) Trace(msg string, args ...any) { a.Log(hclog.Trace, msg, args...) }
func (a *hclogger) Debug(msg string, args ...any) { a.Log(hclog.Debug, msg, args...) }
func (a *hclogger) Info(msg string, args ...any)  { a.Log(hclog.Info, msg, args...) }
func (a *hclogger) Warn(msg string, args ...any)  { a.Log(hclog.Warn, msg, args...) }
func (a *hclogger) Error(msg string, args ...any) { a.Log(hclog.Error, msg, args...) }

func (a *hclogger) enabled(l hclog.Level) bool {
	return a.l.Enabled(context.Background(), toSlog(l))
}

func (a *hclogger) IsTrace() bool { return a.enabled(hclog.Trace) }
func (a *hclogger) IsDebug() bool { return a.enabled(hclog.Debug) }
func (a *hclogger) IsInfo() bool  { return a.enabled(hclog.Info) }
func (a *hclogger) IsWarn() bool  { return a.enabled(hclog.Warn) }
func (a *hclogger) IsError() bool { return a.enabled(hclog.Error) }

func (a *hclogger) ImpliedArgs() []any { return a.implied }

func (a *hclogger) With(args ...any) hclog.Logger {
	c := *a
	c.implied = append(append([]any(nil), a.implied...), args...)
	return &c
}

func (a *hclogger) Name() string { return a.name }

func (a *hclogger) Named(name string) hclog.Logger {
	if a.name != "" {
		name = a.name + "." + name
	}
	return a.ResetNamed(name)
}

func (a *hclogger) ResetNamed(name string) hclog.Logger {
	c := *a
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler decides.
func (a *hclogger) SetLevel(hclog.Level) {}

func (a *hclogger) GetLevel() hclog.Level {
	for _, m := range levels {
		if a.enabled(m.h) {
			return m.h
		}
	}
	return hclog.Off
}

func (a *hclogger) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(a.l.Handler(), slog.LevelInfo)
}

func (a *hclogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	return a.StandardLogger(opts).Writer()
}

// rawStderr returns the writer of a plugin process's original stderr (fd
// 2): what reaches it bypasses the SDK's os.Stderr, as a Go crash, the
// output of processes the plugin starts, and go-plugin's hclog lines (JSON)
// do. Every line goes to the rule's h.Log, where the host's log budget
// applies: an hclog line at its level as "message key=value..." (keys
// sorted, "@" keys left out), a Go crash ("panic: " or "fatal error: ", and
// every line after it) at error, anything else at warn.
func rawStderr(h abi.Host) *lineWriter {
	crashed := false // guarded by the lineWriter's mutex
	return newLineWriter(func(line string) {
		if level, msg, ok := hclogLine(line); ok {
			h.Log(level, msg)
			return
		}
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") {
			crashed = true
		}
		level := abi.LevelWarn
		if crashed {
			level = abi.LevelError
		}
		h.Log(level, line)
	})
}

// hclogLevels maps hclog's JSON level names to ABI log levels.
var hclogLevels = map[string]int32{
	"trace": abi.LevelDebug, "debug": abi.LevelDebug, "info": abi.LevelInfo,
	"warn": abi.LevelWarn, "error": abi.LevelError,
}

// hclogLine parses an hclog JSON line: its ABI level and its message
// followed by its other fields; false when line is not one.
func hclogLine(line string) (int32, string, bool) {
	if !strings.HasPrefix(line, "{") {
		return 0, "", false
	}
	var fields map[string]any
	if json.Unmarshal([]byte(line), &fields) != nil {
		return 0, "", false
	}
	msg, ok := fields["@message"].(string)
	if !ok {
		return 0, "", false
	}
	name, _ := fields["@level"].(string)
	level, ok := hclogLevels[name]
	if !ok {
		level = abi.LevelInfo
	}
	keys := make([]string, 0, len(fields))
	for k := range fields {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	var b strings.Builder
	b.WriteString(msg)
	for _, k := range keys {
		fmt.Fprintf(&b, " %s=%v", k, fields[k])
	}
	return level, b.String(), true
}

// maxLine is the longest line a lineWriter passes on in one piece.
const maxLine = 16 << 10

// lineWriter passes what is written to it to emit line by line (without the
// newline and a "\r" before it); a line longer than maxLine is split into
// pieces of maxLine bytes, and Flush passes on a partial last line. The
// lines do not depend on how the output is cut into writes: the last
// maxLine+1 bytes of an unfinished line wait for the rest (a line of
// maxLine bytes is one piece, its "\r\n" in the next write or not).
type lineWriter struct {
	mu   sync.Mutex
	buf  []byte
	emit func(line string)
}

func newLineWriter(emit func(string)) *lineWriter { return &lineWriter{emit: emit} }

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		line := bytes.TrimSuffix(w.buf[:i], []byte{'\r'})
		for len(line) > maxLine {
			w.emit(string(line[:maxLine]))
			line = line[maxLine:]
		}
		w.emit(string(line))
		w.buf = w.buf[i+1:]
	}
	for len(w.buf) > maxLine+1 {
		w.emit(string(w.buf[:maxLine]))
		w.buf = w.buf[maxLine:]
	}
	if len(w.buf) == 0 {
		w.buf = nil
	}
	return len(p), nil
}

// Flush passes on a partial last line.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.buf) > maxLine {
		w.emit(string(w.buf[:maxLine]))
		w.buf = w.buf[maxLine:]
	}
	if len(w.buf) > 0 {
		w.emit(string(w.buf))
	}
	w.buf = nil
}
