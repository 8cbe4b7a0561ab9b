package main

import (
	"fmt"
	"io"
	"log/slog"
)

// logHandler returns the handler for --log-format: "text" (slog's
// key=value lines, the default) or "json" (one JSON object per line, for
// log collectors).
func logHandler(w io.Writer, format string, level slog.Leveler) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch format {
	case "text", "":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	}
	return nil, fmt.Errorf("want text or json")
}
