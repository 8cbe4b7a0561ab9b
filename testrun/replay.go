package testrun

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// Write is one write a rule made during a replay.
type Write struct {
	AtMs  int64  `json:"at_ms"` // virtual time since the trace's start
	Cause string `json:"cause"` // "start", "timer" or "line N" (the trace record)
	Rule  string `json:"rule"`
	Op    string `json:"op"` // SET or DEL
	Key   string `json:"key"`
	Value []byte `json:"-"`
	// Status is the outcome of a write a rule made in the replay of a
	// host trace when it was not OK (FENCED, LOCK_LOST, NOT_APPLIED, ...,
	// or StatusNotRecorded); empty otherwise. The replay of a trace of
	// ssrun record lists only the writes that were applied.
	Status string `json:"status,omitempty"`
}

// String is the write as one line of `ssrun replay`'s output.
func (wr Write) String() string {
	s := fmt.Sprintf("+%dms %s %s %s %s", wr.AtMs, wr.Cause, wr.Rule, wr.Op, wr.Key)
	if wr.Op == "SET" {
		s += " " + strconv.Quote(string(wr.Value))
	}
	if wr.Status != "" {
		s += " " + wr.Status
	}
	return s
}

// MarshalJSON puts the value as text when it is UTF-8, else as value_b64.
func (wr Write) MarshalJSON() ([]byte, error) {
	type plain Write
	j := struct {
		plain
		Value    *string `json:"value,omitempty"`
		ValueB64 []byte  `json:"value_b64,omitempty"`
	}{plain: plain(wr)}
	if wr.Op == "SET" {
		if utf8.Valid(wr.Value) {
			v := string(wr.Value)
			j.Value = &v
		} else {
			j.ValueB64 = wr.Value
		}
	}
	return json.Marshal(j)
}

// ReplayOptions configure Replay.
type ReplayOptions struct {
	// Runtimes and Config as for Options.
	Runtimes []abi.Runtime
	Config   func(path string) (host.RuleConfig, error)
	// Log, when set, receives the rules' log lines and failures
	// ("RULE: LEVEL: message"), in order.
	Log func(line string)
	// Mismatch, when set, receives where the replay of a host trace parts
	// from the recording, in order (see Mismatch).
	Mismatch func(Mismatch)
}

// Replay runs the rules in dir against trace on a virtual clock and
// returns the writes they make, in order.
//
// The trace's first reads seed the store and the clock starts at its
// header's start; each later record is applied at its t_ms, after the
// timers and expiries due before it have fired:
//   - a notification is an outside write of that key, with its version;
//     but a notification that repeats a write a rule made in this replay
//     (same key, op and value, not yet matched) is the echo of that write
//     in the recording and is skipped, so a rule's write is not applied
//     twice;
//   - disconnected takes the store down (calls fail with UNAVAILABLE);
//     the reads after a reconnection change the keys they find changed;
//     connected brings the store up, resyncing the watchers of those keys.
//
// A trace recorded inside a host (Header.Source SourceHost) is replayed
// differently, on what the rules saw rather than on an in-memory store:
// each recorded event is handled by its rule, at its recorded time, and
// every host call the rule makes is answered with the recorded reply of
// the same request in the same event (a write refused FENCED live is
// FENCED again; now() reads the recorded clock). A request the live run
// did not make, made differently, or a request it made that the replay
// does not, goes to opts.Mismatch. The writes returned are every set, del
// and vdel the rules asked for, with their outcome (Write.Status).
//
// Two replays of the same trace and rules make the same calls in the same
// order and return the same writes.
func Replay(ctx context.Context, tr *TraceData, dir string, opts ReplayOptions) (writes []Write, err error) {
	if tr.Header.Source == SourceHost {
		return replayHost(ctx, tr, dir, opts)
	}
	rules, err := compile(ctx, &File{Path: filepath.Join(dir, "replay")}, Options{Runtimes: opts.Runtimes, Config: opts.Config})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadInput, dir, err)
	}
	w := newWorld(time.UnixMilli(tr.Header.StartMs))
	recs := tr.Records
	for len(recs) > 0 && recs[0].Kind == RecordGet {
		if r := recs[0]; r.Found {
			w.store[r.Key] = &entry{value: r.Bytes(), version: r.Version}
		}
		recs = recs[1:]
	}

	watched := map[string]bool{}
	for _, k := range tr.Header.Keys {
		watched[k] = true
	}
	echoes := map[string][]string{} // per recorded key: rule writes not yet seen in the trace
	cause := "start"
	w.onWrite = func(rule, op, key string, value []byte) {
		writes = append(writes, Write{AtMs: w.now - tr.Header.StartMs, Cause: cause, Rule: rule, Op: op, Key: key, Value: slices.Clone(value)})
		if watched[key] {
			echoes[key] = append(echoes[key], echoKey(op, value))
		}
	}
	defer func() {
		w.finish(ctx)
		for _, r := range w.rules {
			if cerr := r.script.Close(ctx); cerr != nil && err == nil {
				err = fmt.Errorf("closing %s: %w", r.name, cerr)
			}
		}
	}()
	if err := w.start(ctx, rules); err != nil {
		return nil, err
	}
	w.flushLogs(opts.Log)
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return writes, err
		}
		cause = "timer"
		if d := r.TMs - w.now; d > 0 {
			w.advance(ctx, time.Duration(d)*time.Millisecond)
		}
		cause = "line " + strconv.Itoa(r.Line)
		w.mu.Lock()
		switch r.Kind {
		case RecordNotify:
			op := "DEL"
			if r.Op == "SET" {
				op = "SET"
			}
			if q := echoes[r.Key]; len(q) > 0 {
				if i := slices.Index(q, echoKey(op, r.Bytes())); i >= 0 {
					echoes[r.Key] = q[i+1:]
					break
				}
			}
			w.outside(r.Key, r.Op == "SET", r.Bytes(), r.Version)
		case RecordGet:
			e, ok := w.store[r.Key]
			if ok != r.Found || ok && string(e.value) != string(r.Bytes()) {
				w.outside(r.Key, r.Found, r.Bytes(), r.Version)
			}
		case RecordDisconnected:
			w.down = true
		}
		w.mu.Unlock()
		if r.Kind == RecordConnected && w.down {
			w.up()
		}
		w.drain(ctx)
		w.flushLogs(opts.Log)
	}
	return writes, nil
}

// flushLogs hands the log lines so far to log, and forgets them and the
// step's writes (a replay keeps its own list), so a long trace does not
// hold them all.
func (w *world) flushLogs(log func(string)) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if log != nil {
		for _, l := range w.logs {
			log(l)
		}
	}
	w.writes, w.logs = nil, nil
}

// echoKey identifies a write for matching it with its notification.
func echoKey(op string, value []byte) string {
	if op == "DEL" {
		return "DEL"
	}
	return "SET " + string(value)
}

// outside applies a change of key from outside the rules, with the
// recorded version, and notifies the watchers (or marks the key for a
// resync when the store is down). Under mu.
func (w *world) outside(key string, set bool, value []byte, version string) {
	if version == "" {
		version = w.version()
	}
	ev := abi.Event{Key: key, Op: abi.OpDelete, Version: version}
	if set {
		w.store[key] = &entry{value: value, version: version}
		ev = abi.Event{Key: key, Op: abi.OpSet, Value: value, Version: version}
	} else {
		delete(w.store, key)
	}
	if w.down {
		w.dirty[key] = true
		return
	}
	w.notify(ev, nil, 0)
}

// PrintWrites prints writes on out, one line each (Write.String), or one
// JSON object per line when asJSON.
func PrintWrites(out io.Writer, writes []Write, asJSON bool) error {
	var b strings.Builder
	for _, wr := range writes {
		if asJSON {
			j, err := json.Marshal(wr)
			if err != nil {
				return err
			}
			b.Write(j)
		} else {
			b.WriteString(wr.String())
		}
		b.WriteByte('\n')
	}
	_, err := io.WriteString(out, b.String())
	return err
}

// WriteDiff is one difference between the writes of two replays: where
// the writes of a (Removed) stand instead of those of b (Added). One of
// them may be empty: a write only one version makes.
type WriteDiff struct {
	A       int     `json:"a"` // the first write of Removed in a, counted from 1; or the write of a it comes before
	B       int     `json:"b"` // the same in b
	Removed []Write `json:"removed"`
	Added   []Write `json:"added"`
}

// String is the difference as lines of `ssrun replay --diff`.
func (d WriteDiff) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "write %d / %d:", d.A, d.B)
	for _, w := range d.Removed {
		b.WriteString("\n  - " + w.String())
	}
	for _, w := range d.Added {
		b.WriteString("\n  + " + w.String())
	}
	return b.String()
}

// DiffWrites compares the writes of two replays, aligned as a shortest
// edit script (a longest common subsequence of writes kept: one write more
// in b is one difference, not a change of every later write), and returns
// the differences, nil when equal.
func DiffWrites(a, b []Write) []WriteDiff {
	sa, sb := make([]string, len(a)), make([]string, len(b))
	for i, w := range a {
		sa[i] = w.String()
	}
	for i, w := range b {
		sb[i] = w.String()
	}
	var out []WriteDiff
	var cur *WriteDiff
	for _, e := range editScript(sa, sb) {
		if e.kind == '=' {
			cur = nil
			continue
		}
		if cur == nil {
			out = append(out, WriteDiff{A: e.i + 1, B: e.j + 1, Removed: []Write{}, Added: []Write{}})
			cur = &out[len(out)-1]
		}
		if e.kind == '-' {
			cur.Removed = append(cur.Removed, a[e.i])
		} else {
			cur.Added = append(cur.Added, b[e.j])
		}
	}
	return out
}
