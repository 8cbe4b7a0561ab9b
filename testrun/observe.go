package testrun

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// observed is what an engine sees its host do: the log (it is the host's
// slog.Handler) and, as its Recorder, the rules' writes, locks and
// LOCK_LOST events.
type observed struct {
	mu     sync.Mutex
	logs   []logLine
	writes []string
	// onWrite, when set, is told every write a rule made (replay); atMs
	// is the host's clock.
	onWrite func(rule, op, key string, value []byte, atMs int64)
	locks   map[string]heldLock        // by lock name: the last rule that took it
	fenced  map[string]map[string]bool // by lock name: keys written fenced with it
	lostN   map[string]int             // LOCK_LOST events, by lock name
}

// heldLock is a lease a rule took.
type heldLock struct {
	rule string
	ttl  time.Duration
}

func newObserved() *observed {
	return &observed{locks: map[string]heldLock{}, fenced: map[string]map[string]bool{}, lostN: map[string]int{}}
}

// logLine is a line of the host's log.
type logLine struct {
	text  string
	level slog.Level
	own   bool // a rule's own line (its log calls, print, output)
}

// take returns the step's log lines and writes, and forgets them.
func (o *observed) take() (logs []logLine, writes []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	logs, writes = o.logs, o.writes
	o.logs, o.writes = nil, nil
	return logs, writes
}

// texts returns the text of the lines.
func texts(ls []logLine) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = l.text
	}
	return out
}

func (o *observed) lock(name string) (heldLock, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	l, ok := o.locks[name]
	return l, ok
}

func (o *observed) lost(name string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lostN[name]
}

func (o *observed) fencedWith(name string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Sorted(maps.Keys(o.fenced[name]))
}

// RecordEvent implements host.Recorder.
func (o *observed) RecordEvent(rule string, _ int64, ev abi.Event) {
	if ev.Op == abi.OpLockLost {
		o.mu.Lock()
		o.lostN[ev.Key]++
		o.mu.Unlock()
	}
}

// RecordCall implements host.Recorder: the writes the store applied, in
// order ("SET key value", "DEL key"), and the leases.
func (o *observed) RecordCall(rule string, atMs int64, c host.Call) {
	if c.Status != abi.StatusOK {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	switch c.Verb {
	case "set", "del", "vdel":
		op, line := "SET", "SET "+c.Key+" "+string(c.Value)
		if c.Verb != "set" {
			op, line = "DEL", "DEL "+c.Key
		}
		o.writes = append(o.writes, line)
		if o.onWrite != nil {
			value := c.Value
			if op == "DEL" {
				value = nil
			}
			o.onWrite(rule, op, c.Key, slices.Clone(value), atMs)
		}
		if c.Fence != "" {
			if o.fenced[c.Fence] == nil {
				o.fenced[c.Fence] = map[string]bool{}
			}
			o.fenced[c.Fence][c.Key] = true
		}
	case "lock":
		o.locks[c.Key] = heldLock{rule: rule, ttl: c.TTL}
	case "unlock":
		delete(o.locks, c.Key)
	}
}

// RecordConnection implements host.Recorder.
func (o *observed) RecordConnection(int64, bool) {}

// Enabled implements slog.Handler: every level is kept (the rules' debug
// lines too).
func (o *observed) Enabled(context.Context, slog.Level) bool { return true }

// Handle implements slog.Handler: one line per record, "RULE: LEVEL:
// message key=value ..." for a record about a rule (its own log lines,
// its failures), "LEVEL: message key=value ..." for the others. The
// rules' own lines are kept at every level, the host's from info up (as
// ssrun dev logs them by default).
func (o *observed) Handle(_ context.Context, r slog.Record) error {
	var rule string
	var b strings.Builder
	others := 0
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "rule" && rule == "" {
			rule = a.Value.String()
			return true
		}
		others++
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value.Any())
		return true
	})
	own := rule != "" && others == 0 // the log budget's lines carry the rule alone
	if !own && r.Level < slog.LevelInfo {
		return nil
	}
	line := strings.ToLower(r.Level.String()) + ": " + r.Message + b.String()
	if rule != "" {
		line = rule + ": " + line
	}
	o.mu.Lock()
	o.logs = append(o.logs, logLine{text: line, level: r.Level, own: own})
	o.mu.Unlock()
	return nil
}

// WithAttrs implements slog.Handler.
func (o *observed) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrsHandler{o: o, attrs: as}
}

// WithGroup implements slog.Handler (groups are not shown).
func (o *observed) WithGroup(string) slog.Handler { return o }

// attrsHandler is an observed's handler with attributes of its own.
type attrsHandler struct {
	o     *observed
	attrs []slog.Attr
}

func (h *attrsHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h *attrsHandler) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	return h.o.Handle(ctx, r)
}
func (h *attrsHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &attrsHandler{o: h.o, attrs: append(slices.Clone(h.attrs), as...)}
}
func (h *attrsHandler) WithGroup(string) slog.Handler { return h }

var (
	_ host.Recorder = (*observed)(nil)
	_ slog.Handler  = (*observed)(nil)
)
