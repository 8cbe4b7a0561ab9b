package testrun

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
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
// A trace of ssrun record is replayed on the engine of ssrun test (the
// real host, serial, on an in-process store and a virtual clock): the
// trace's first reads seed the store and the clock starts at its header's
// start; each later record is applied at its t_ms, after the timers,
// expiries and lease renewals due before it have run:
//   - a notification is an outside write of that key (the store gives it
//     a version of its own);
//     but a notification that repeats a write a rule made in this replay
//     (same key, op and value, not yet matched) is the echo of that write
//     in the recording and is skipped, so a rule's write is not applied
//     twice;
//   - disconnected takes the host's connection down (calls fail with
//     UNAVAILABLE); the reads after a reconnection change the keys they
//     find changed; connected brings the connection up, and the host
//     resyncs the keys that changed as it does after a reconnection.
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
	recs := tr.Records
	var first []Record // the first reads: the store before the rules start
	for len(recs) > 0 && recs[0].Kind == RecordGet {
		first = append(first, recs[0])
		recs = recs[1:]
	}
	watched := map[string]bool{}
	for _, k := range tr.Header.Keys {
		watched[k] = true
	}
	echoes := map[string][]string{} // per recorded key: rule writes not yet seen in the trace
	cause := "start"                // of the writes being made; under obs.mu
	obs := newObserved()
	obs.onWrite = func(rule, op, key string, value []byte, atMs int64) {
		writes = append(writes, Write{AtMs: atMs - tr.Header.StartMs, Cause: cause, Rule: rule, Op: op, Key: key, Value: value})
		if watched[key] {
			echoes[key] = append(echoes[key], echoKey(op, value))
		}
	}
	setCause := func(c string) {
		obs.mu.Lock()
		cause = c
		obs.mu.Unlock()
	}
	flushLogs := func() { // the rules' own lines, and the host's warnings and errors (failures)
		logs, _ := obs.take()
		for _, l := range logs {
			if opts.Log != nil && (l.own || l.level >= slog.LevelWarn) {
				opts.Log(l.text)
			}
		}
	}
	e, err := newEngine(ctx, time.UnixMilli(tr.Header.StartMs), 0, rules, opts.Runtimes, obs, func(ctx context.Context, out *protocol.Client) error {
		for _, r := range first {
			if r.Found {
				if _, err := out.Set(ctx, []byte(r.Key), r.Bytes(), protocol.SetOptions{}); err != nil {
					return err
				}
			}
		}
		return nil
	})
	defer func() {
		if cerr := e.close(context.WithoutCancel(ctx)); cerr != nil && err == nil {
			err = fmt.Errorf("stopping the rules: %w", cerr)
		}
	}()
	if err != nil {
		return nil, err
	}
	flushLogs()
	down := false
	for _, r := range recs {
		if err := ctx.Err(); err != nil {
			return writes, err
		}
		setCause("timer")
		if err := e.advance(ctx, time.UnixMilli(max(r.TMs, e.ms()))); err != nil {
			return writes, err
		}
		setCause("line " + strconv.Itoa(r.Line))
		err := e.hold(ctx, func() error {
			switch r.Kind {
			case RecordNotify:
				op := "DEL"
				if r.Op == "SET" {
					op = "SET"
				}
				obs.mu.Lock()
				q := echoes[r.Key]
				i := slices.Index(q, echoKey(op, r.Bytes()))
				if i >= 0 {
					echoes[r.Key] = q[i+1:]
				}
				obs.mu.Unlock()
				if i >= 0 {
					return nil // the echo of a rule's write, made in this replay
				}
				return e.outsideWrite(ctx, r.Key, r.Op == "SET", r.Bytes())
			case RecordGet:
				v, found, err := e.value(ctx, r.Key)
				if err != nil || found == r.Found && (!found || string(v) == string(r.Bytes())) {
					return err
				}
				return e.outsideWrite(ctx, r.Key, r.Found, r.Bytes())
			case RecordDisconnected:
				if !down {
					e.client.LocalDown(errTraceDown)
					down = true
				}
			case RecordConnected:
				if down {
					down = false
					return e.client.LocalUp()
				}
			}
			return nil
		})
		if err != nil {
			return writes, fmt.Errorf("%s:%d: %w", tr.Path, r.Line, err)
		}
		flushLogs()
	}
	return writes, nil
}

// errTraceDown is why the host's connection ends at a disconnected record.
var errTraceDown = errors.New("the recorder's connection went down (a trace record)")

// echoKey identifies a write for matching it with its notification.
func echoKey(op string, value []byte) string {
	if op == "DEL" {
		return "DEL"
	}
	return "SET " + string(value)
}

// outsideWrite sets key to value (or deletes it) from outside the rules.
func (e *engine) outsideWrite(ctx context.Context, key string, set bool, value []byte) error {
	if set {
		_, err := e.outside.Set(ctx, []byte(key), value, protocol.SetOptions{})
		return err
	}
	_, err := e.outside.Del(ctx, []byte(key), protocol.DelOptions{})
	return err
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
