package testrun

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// Mismatch is where a replay of a host trace parts from the recording: a
// request the replay made that the live run did not make (Recorded empty)
// or made differently, or one the live run made that the replay did not
// (Replayed empty).
type Mismatch struct {
	Line     int    `json:"line,omitempty"` // of the recorded call; 0 when there is none
	Cause    string `json:"cause"`          // "start" or "line N": the event being handled
	Rule     string `json:"rule"`
	Recorded string `json:"recorded,omitempty"` // the live request and its reply
	Replayed string `json:"replayed,omitempty"` // the replay's request
}

// String is the mismatch as one line of `ssrun replay`'s output.
func (m Mismatch) String() string {
	switch {
	case m.Recorded == "":
		return fmt.Sprintf("%s %s: the live run did not make %s", m.Cause, m.Rule, m.Replayed)
	case m.Replayed == "":
		return fmt.Sprintf("%s %s: the replay did not make %s (line %d)", m.Cause, m.Rule, m.Recorded, m.Line)
	}
	return fmt.Sprintf("%s %s: the live run made %s (line %d), the replay %s", m.Cause, m.Rule, m.Recorded, m.Line, m.Replayed)
}

// StatusNotRecorded is Write.Status of a write the live run did not make:
// the replay answered it with INTERNAL.
const StatusNotRecorded = "NOT_RECORDED"

// tapeDeck is the replay of a host trace: every rule's tape, and what the
// replay found. The rules run one at a time; mu guards against a runtime
// calling its host from a goroutine of its own.
type tapeDeck struct {
	start int64
	seed  uint64 // of the rules' math.random, from the header
	opts  ReplayOptions

	mu     sync.Mutex
	tapes  map[string]*tape
	atMs   int64  // the time of the event being handled
	cause  string // "start" or "line N"
	writes []Write
}

// tape is one rule's abi.Host in the replay of a host trace: it answers
// each call with the recorded reply of the same request, from the calls
// the rule made live while handling the same event.
type tape struct {
	d    *tapeDeck
	name string
	segs [][]*Record // the rule's calls: at start, then after each of its events
	seg  int         // the segment of the event being handled
	next []*Record   // what is left of it
}

var _ abi.Host = (*tape)(nil)

// replayHost is Replay of a trace recorded inside a host (see Replay).
func replayHost(ctx context.Context, tr *TraceData, dir string, opts ReplayOptions) (writes []Write, err error) {
	rules, err := compile(ctx, &File{Path: filepath.Join(dir, "replay")}, Options{Runtimes: opts.Runtimes, Config: opts.Config})
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrBadInput, dir, err)
	}
	d := &tapeDeck{start: tr.Header.StartMs, seed: tr.Header.Seed, opts: opts, tapes: map[string]*tape{}, atMs: tr.Header.StartMs, cause: "start"}
	tapeOf := func(rule string) *tape {
		t := d.tapes[rule]
		if t == nil {
			t = &tape{d: d, name: rule, segs: [][]*Record{nil}}
			d.tapes[rule] = t
		}
		return t
	}
	for i := range tr.Records {
		switch r := &tr.Records[i]; r.Kind {
		case RecordEvent:
			t := tapeOf(r.Rule)
			t.segs = append(t.segs, nil)
		case RecordCall:
			t := tapeOf(r.Rule)
			t.segs[len(t.segs)-1] = append(t.segs[len(t.segs)-1], r)
		}
	}
	scripts := map[string]abi.Script{}
	defer func() {
		for _, r := range rules {
			if s := scripts[r.name]; s != nil {
				if cerr := s.Close(ctx); cerr != nil && err == nil {
					err = fmt.Errorf("closing %s: %w", r.name, cerr)
				}
			}
		}
	}()
	for _, r := range rules {
		t := tapeOf(r.name)
		t.next = t.segs[0]
		lim := abi.Limits{CallTimeout: r.cfg.Timeout, MemoryBytes: r.cfg.MemoryBytes}.WithDefaults()
		s, err := r.prog.Start(ctx, t, lim)
		if err != nil {
			return nil, fmt.Errorf("starting %s: %w", r.name, err)
		}
		scripts[r.name] = s
		t.unmade()
	}
	missing := map[string]bool{}
	for i := range tr.Records {
		r := &tr.Records[i]
		if err := ctx.Err(); err != nil {
			return d.writes, err
		}
		if r.Kind != RecordEvent {
			continue
		}
		t := d.tapes[r.Rule]
		d.mu.Lock()
		d.atMs, d.cause = r.TMs, "line "+strconv.Itoa(r.Line)
		t.seg++
		t.next = t.segs[t.seg]
		d.mu.Unlock()
		s := scripts[r.Rule]
		if s == nil {
			if !missing[r.Rule] {
				missing[r.Rule] = true
				d.log(fmt.Sprintf("%s: the trace has events of this rule, which is not in %s: skipped", r.Rule, dir))
			}
			continue
		}
		ev := abi.Event{Key: r.Key, Op: abi.Op(r.Op), Version: r.Version, Resync: r.Resync, Deadline: r.Deadline, Late: r.Late}
		if r.Value != nil || r.ValueB64 != nil {
			ev.Value = r.Bytes()
		}
		if err := s.Handle(ctx, ev); err != nil {
			d.log(fmt.Sprintf("%s: error: rule failed on %s %s: %v", r.Rule, ev.Op, ev.Key, err))
		}
		t.unmade()
	}
	return d.writes, nil
}

func (d *tapeDeck) log(line string) {
	if d.opts.Log != nil {
		d.opts.Log(line)
	}
}

func (d *tapeDeck) mismatch(m Mismatch) {
	if d.opts.Mismatch != nil {
		d.opts.Mismatch(m)
	}
}

// unmade reports the calls the live run made in the event just handled
// that the replay did not.
func (t *tape) unmade() {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	for _, r := range t.next {
		t.d.mismatch(Mismatch{Line: r.Line, Cause: t.d.cause, Rule: t.name, Recorded: r.reply()})
	}
	t.next = nil
}

// play answers the call c: with the recorded reply of the next call of
// the rule in this event when it is the same request; with that reply
// too, reported as a mismatch, when it is the same verb on the same key;
// otherwise the call is reported as not made live and fails with INTERNAL,
// and the recording stays where it was.
func (t *tape) play(c host.Call) (*Record, error) {
	t.d.mu.Lock()
	defer t.d.mu.Unlock()
	got := callRecord(t.name, c)
	if len(t.next) > 0 {
		r := t.next[0]
		if r.Verb == got.Verb && r.Key == got.Key {
			t.next = t.next[1:]
			if r.request() != got.request() {
				t.d.mismatch(Mismatch{Line: r.Line, Cause: t.d.cause, Rule: t.name, Recorded: r.reply(), Replayed: got.request()})
			}
			t.wrote(c, r.Status)
			return r, replyError(r)
		}
	}
	t.d.mismatch(Mismatch{Cause: t.d.cause, Rule: t.name, Replayed: got.request()})
	t.wrote(c, StatusNotRecorded)
	return nil, abi.Errorf(abi.StatusInternal, "replay: %s by %s is not in the recording", got.request(), t.name)
}

// wrote adds c to the replay's writes, if it is one, with its outcome
// (status; empty when OK).
func (t *tape) wrote(c host.Call, status string) {
	op := "SET"
	switch c.Verb {
	case "set":
	case "del", "vdel":
		op = "DEL"
	default:
		return
	}
	if status == abi.StatusOK.String() {
		status = ""
	}
	t.d.writes = append(t.d.writes, Write{AtMs: t.d.atMs - t.d.start, Cause: t.d.cause, Rule: t.name, Op: op, Key: c.Key,
		Value: slices.Clone(c.Value), Status: status})
}

// replyError is the error of a recorded reply, nil when it is OK.
func replyError(r *Record) error {
	st, _ := abi.ParseStatus(r.Status)
	if st == abi.StatusOK {
		return nil
	}
	return abi.Errorf(st, "%s", r.Err)
}

func (t *tape) Get(_ context.Context, key string) (abi.Value, error) {
	r, err := t.play(host.Call{Verb: "get", Key: key})
	if err != nil || r == nil {
		return abi.Value{}, err
	}
	return abi.Value{Data: r.Bytes(), Version: r.Version}, nil
}

func (t *tape) Set(_ context.Context, key string, value []byte, opts abi.SetOptions) (string, error) {
	r, err := t.play(host.Call{Verb: "set", Key: key, Value: value, Cond: opts.Cond, TTL: opts.TTL, Fence: opts.Fence})
	if r == nil {
		return "", err
	}
	return r.Version, err
}

func (t *tape) Del(_ context.Context, key string, opts abi.DelOptions) error {
	_, err := t.play(host.Call{Verb: "del", Key: key, Fence: opts.Fence})
	return err
}

func (t *tape) VDel(_ context.Context, key string, value []byte, opts abi.DelOptions) error {
	_, err := t.play(host.Call{Verb: "vdel", Key: key, Value: value, Fence: opts.Fence})
	return err
}

func (t *tape) Watch(_ context.Context, key string, opts abi.WatchOptions) error {
	_, err := t.play(host.Call{Verb: "watch", Key: key, Self: opts.Self})
	return err
}

func (t *tape) Unwatch(_ context.Context, key string) error {
	_, err := t.play(host.Call{Verb: "unwatch", Key: key})
	return err
}

func (t *tape) Lock(_ context.Context, name string, ttl time.Duration, opts abi.LockOptions) (string, error) {
	r, err := t.play(host.Call{Verb: "lock", Key: name, TTL: ttl, Wait: opts.Wait})
	if r == nil {
		return "", err
	}
	return r.Version, err
}

func (t *tape) Unlock(_ context.Context, name string) error {
	_, err := t.play(host.Call{Verb: "unlock", Key: name})
	return err
}

func (t *tape) Log(level int32, msg string) {
	t.d.log(fmt.Sprintf("%s: %s: %s", t.name, levelName(level), msg))
}

func (t *tape) Timer(_ context.Context, name string, delay time.Duration, opts abi.TimerOptions) error {
	_, err := t.play(host.Call{Verb: "timer", Key: name, TTL: delay, Every: opts.Every, Value: opts.Payload})
	return err
}

func (t *tape) Cancel(_ context.Context, name string) error {
	_, err := t.play(host.Call{Verb: "cancel", Key: name})
	return err
}

// Now answers the recorded reading; a reading the live run did not take
// is the time of the event being handled.
func (t *tape) Now() int64 {
	r, _ := t.play(host.Call{Verb: "now"})
	if r == nil {
		t.d.mu.Lock()
		defer t.d.mu.Unlock()
		return t.d.atMs
	}
	return r.NowMs
}

// levelName names a log level as the host's log lines do.
func levelName(l int32) string {
	switch {
	case l >= abi.LevelError:
		return "error"
	case l >= abi.LevelWarn:
		return "warn"
	case l >= abi.LevelInfo:
		return "info"
	}
	return "debug"
}

func (t *tape) Keys(_ context.Context, pattern string, opts abi.KeysOptions) ([]string, error) {
	r, err := t.play(host.Call{Verb: "keys", Key: pattern, Limit: opts.Limit})
	if r == nil || err != nil {
		return nil, err
	}
	return slices.Clone(r.Keys), nil
}

func (t *tape) WatchPattern(_ context.Context, pattern string, opts abi.WatchOptions) error {
	_, err := t.play(host.Call{Verb: "watch_pattern", Key: pattern, Self: opts.Self})
	return err
}

func (t *tape) UnwatchPattern(_ context.Context, pattern string) error {
	_, err := t.play(host.Call{Verb: "unwatch_pattern", Key: pattern})
	return err
}
