package broker

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/mochi-mqtt/server/v2/packets"
)

// This file adapts mochi's logs to the broker's: mochi's records describe
// client behaviour, not ours, so they go one level lower (INFO→DEBUG,
// WARN→INFO, ERROR→WARN), and no payload or value reaches a log line at any
// level: mochi attaches whole packets to some records ("error processing
// packet" on a client abort, at WARN), which this handler replaces with a
// summary (type, topic, packet id, payload size).

// mochiLogger returns the logger mochi writes to.
func mochiLogger(l *slog.Logger) *slog.Logger {
	return slog.New(mochiHandler{l.Handler()}).With("component", "mqtt")
}

type mochiHandler struct{ h slog.Handler }

func (q mochiHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return q.h.Enabled(ctx, l-4)
}

func (q mochiHandler) Handle(ctx context.Context, r slog.Record) error {
	level := r.Level - 4
	if r.Message == "" {
		// mochi's message-less records are a client connection ending
		// (e.g. "use of closed network connection"): debug detail.
		level = slog.LevelDebug
	}
	if !q.h.Enabled(ctx, level) {
		return nil
	}
	out := slog.NewRecord(r.Time, level, r.Message, r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(redact(a))
		return true
	})
	return q.h.Handle(ctx, out)
}

func (q mochiHandler) WithAttrs(as []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(as))
	for i, a := range as {
		red[i] = redact(a)
	}
	return mochiHandler{q.h.WithAttrs(red)}
}

func (q mochiHandler) WithGroup(name string) slog.Handler {
	return mochiHandler{q.h.WithGroup(name)}
}

// redact replaces a packet, wherever mochi attaches one, by its summary.
func redact(a slog.Attr) slog.Attr {
	switch v := a.Value.Any().(type) {
	case packets.Packet:
		return slog.String(a.Key, summary(&v))
	case *packets.Packet:
		if v != nil {
			return slog.String(a.Key, summary(v))
		}
	}
	if a.Value.Kind() == slog.KindGroup {
		attrs := a.Value.Group()
		red := make([]any, len(attrs))
		for i, g := range attrs {
			red[i] = redact(g)
		}
		return slog.Group(a.Key, red...)
	}
	return a
}

func summary(pk *packets.Packet) string {
	s := fmt.Sprintf("%s packet_id=%d", packets.PacketNames[pk.FixedHeader.Type], pk.PacketID)
	if pk.TopicName != "" {
		s += fmt.Sprintf(" topic=%q", pk.TopicName)
	}
	if pk.FixedHeader.Type == packets.Publish {
		s += fmt.Sprintf(" payload_bytes=%d", len(pk.Payload))
	}
	return s
}
