// Package logbudget bounds what one rule logs: lines and bytes per window,
// the rest suppressed and summarised in one line per window.
package logbudget

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/ssrun/ssrun/host/clock"
)

// logWindow is the interval of a log budget.
const logWindow = time.Second

// Budget holds what one rule logs to its budget (host.RuleConfig.LogLines and
// LogBytes): per window of logWindow at most that many lines and message
// bytes reach the log. The rest is dropped and counted, and one line per
// window says how much ("rule x: N lines / M bytes suppressed"), written by
// the first line of the next window or, if none comes, by a timer when the
// window ends.
type Budget struct {
	log   *slog.Logger
	clock clock.Clock
	rule  string

	mu                   sync.Mutex
	lines, bytes         int   // the budget per window
	start                int64 // of the current window, on clock.Mono's clock
	usedLines, usedBytes int
	// Suppressed in the current window, not yet summarised; and in total.
	winLines, winBytes     int
	totalLines, totalBytes uint64
	timer                  clock.Timer // pending summary of the current window
	closed                 bool
	timers                 sync.WaitGroup // the timer's function, while it runs
}

func New(log *slog.Logger, c clock.Clock, rule string, lines, bytes int) *Budget {
	b := &Budget{log: log, clock: c, rule: rule, start: clock.Mono(c)}
	b.SetLimits(lines, bytes)
	return b
}

// SetLimits applies a (re)loaded rule's budget: lines and bytes per window.
func (b *Budget) SetLimits(lines, bytes int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lines, b.bytes = lines, bytes
}

// Write logs msg at level for the rule, within the budget.
func (b *Budget) Write(level slog.Level, msg string) {
	b.mu.Lock()
	t := clock.Mono(b.clock)
	if t-b.start >= int64(logWindow) {
		b.summaryLocked()
		b.start, b.usedLines, b.usedBytes = t, 0, 0
	}
	if len(msg) > b.bytes {
		msg = truncate(msg, b.bytes)
	}
	if b.usedLines < b.lines && b.usedBytes+len(msg) <= b.bytes {
		b.usedLines++
		b.usedBytes += len(msg)
		b.mu.Unlock()
		b.log.Log(context.Background(), level, msg, "rule", b.rule)
		return
	}
	b.winLines++
	b.winBytes += len(msg)
	b.totalLines++
	b.totalBytes += uint64(len(msg))
	if b.timer == nil && !b.closed {
		b.timers.Add(1)
		b.timer = b.clock.AfterFunc(time.Duration(b.start+int64(logWindow)-t), b.flush)
	}
	b.mu.Unlock()
}

// truncate cuts msg to at most n bytes, on a character boundary.
func truncate(msg string, n int) string {
	for n > 0 && n < len(msg) && !utf8.RuneStart(msg[n]) {
		n--
	}
	return msg[:n]
}

// flush writes the summary of a window that ended with nothing logged since.
func (b *Budget) flush() {
	defer b.timers.Done()
	b.mu.Lock()
	defer b.mu.Unlock()
	b.timer = nil
	if left := b.start + int64(logWindow) - clock.Mono(b.clock); left > 0 && !b.closed {
		b.timers.Add(1) // woke early: the window is not over
		b.timer = b.clock.AfterFunc(time.Duration(left), b.flush)
		return
	}
	b.summaryLocked()
}

// summaryLocked writes the summary line of the current window, if anything
// was suppressed in it.
func (b *Budget) summaryLocked() {
	if b.winLines == 0 {
		return
	}
	b.log.Warn(fmt.Sprintf("rule %s: %d lines / %d bytes suppressed", b.rule, b.winLines, b.winBytes),
		"rule", b.rule, "budget", fmt.Sprintf("%d lines, %d bytes per second", b.lines, b.bytes))
	b.winLines, b.winBytes = 0, 0
}

// Suppressed returns the lines and bytes suppressed so far.
func (b *Budget) Suppressed() (lines, bytes uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.totalLines, b.totalBytes
}

// Close writes the pending summary and stops the timer; later lines are
// still held to the budget, but summarised only by a later line.
func (b *Budget) Close() {
	b.mu.Lock()
	b.closed = true
	if b.timer != nil && b.timer.Stop() {
		b.timers.Done()
	}
	b.timer = nil
	b.summaryLocked()
	b.mu.Unlock()
	b.timers.Wait()
}
