package testrun

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
)

// callVerbs are the verbs of call records, with the fields each request
// and reply may have beyond rule, verb, status and error: k key (required),
// v value (required), V value (optional), c cond, t ttl_ms, w wait_ms,
// e every_ms, f fence, s self, n now_ms, F found (get), r version, l limit
// and K keys (keys; K in the reply).
var callVerbs = map[string]string{
	"get":     "kVFr",
	"set":     "kvctfr",
	"del":     "kf",
	"vdel":    "kVf",
	"watch":   "ks",
	"unwatch": "k",
	"lock":    "ktwr",
	"unlock":  "k",
	"timer":   "kVte",
	"cancel":  "k",
	"now":     "n",
	// revision 3: k is the pattern
	"keys":            "klK",
	"watch_pattern":   "ks",
	"unwatch_pattern": "k",
}

// eventOps are the ops of event records, with what they may carry: V a
// value, d a deadline and late (TIMER), r a version, y resync.
var eventOps = map[string]string{
	"SET":       "vry",
	"DELETE":    "ry",
	"LOCK_LOST": "",
	"TIMER":     "Vd",
}

// checkHost validates an event or call record.
func (r *Record) checkHost() error {
	if r.Rule == "" {
		return fmt.Errorf("%s without a rule", r.Kind)
	}
	if r.Op != "" && r.Kind == RecordCall || r.Verb != "" && r.Kind == RecordEvent {
		return fmt.Errorf("%s record with both op and verb", r.Kind)
	}
	hasValue := r.Value != nil || r.ValueB64 != nil
	has := map[byte]bool{'k': r.Key != "", 'v': hasValue, 'c': r.Cond != "", 't': r.TTLMs != 0,
		'w': r.WaitMs != 0, 'e': r.EveryMs != 0, 'f': r.Fence != "", 's': r.Self, 'n': r.NowMs != 0, 'F': r.Found,
		'r': r.Version != "", 'd': r.Deadline != 0 || r.Late, 'y': r.Resync, 'l': r.Limit != 0, 'K': r.Keys != nil}
	var allowed, what string
	if r.Kind == RecordEvent {
		ops, ok := eventOps[r.Op]
		if !ok {
			return fmt.Errorf("event op %q, want SET, DELETE, LOCK_LOST or TIMER", r.Op)
		}
		if r.Key == "" {
			return errors.New("event without a key")
		}
		if r.Status != "" || r.Err != "" {
			return errors.New("event with a status")
		}
		allowed, what = "k"+ops, "event "+r.Op
	} else {
		fields, ok := callVerbs[r.Verb]
		if !ok {
			return fmt.Errorf("call of unknown verb %q", r.Verb)
		}
		st, ok := abi.ParseStatus(r.Status)
		if !ok {
			return fmt.Errorf("call %s: unknown status %q", r.Verb, r.Status)
		}
		if (st == abi.StatusOK) != (r.Err == "") {
			return fmt.Errorf("call %s: status %s with error %q", r.Verb, r.Status, r.Err)
		}
		if r.Verb == "get" && r.Found != (st == abi.StatusOK) {
			return errors.New("call get: found and the status disagree")
		}
		if r.Cond != "" && r.Cond != "NX" && r.Cond != "NEX" {
			return fmt.Errorf("call set: cond %q, want NX or NEX", r.Cond)
		}
		if r.TTLMs < 0 || r.WaitMs < 0 || r.EveryMs < 0 || r.Limit < 0 {
			return fmt.Errorf("call %s: a negative duration", r.Verb)
		}
		allowed, what = fields, "call "+r.Verb
	}
	for _, f := range []byte("kvctwefsnFrdylK") { // in a fixed order: the same error every time
		ok := strings.IndexByte(allowed, f) >= 0 || f == 'v' && strings.IndexByte(allowed, 'V') >= 0
		if has[f] && !ok {
			return fmt.Errorf("%s with a field it does not have (%s)", what, fieldName[f])
		}
	}
	for _, f := range []byte(allowed) {
		if (f == 'k' || f == 'v') && !has[f] {
			return fmt.Errorf("%s without its %s", what, fieldName[f])
		}
	}
	return nil
}

var fieldName = map[byte]string{'k': "key", 'v': "value", 'c': "cond", 't': "ttl_ms", 'w': "wait_ms",
	'e': "every_ms", 'f': "fence", 's': "self", 'n': "now_ms", 'F': "found", 'r': "version", 'd': "deadline", 'y': "resync",
	'l': "limit", 'K': "keys"}

// callRecord is the record of a host call c (the reply's time is set by
// the writer).
func callRecord(rule string, c host.Call) Record {
	r := Record{Kind: RecordCall, Rule: rule, Verb: c.Verb, Key: c.Key, Fence: c.Fence, Self: c.Self,
		TTLMs: c.TTL.Milliseconds(), WaitMs: c.Wait.Milliseconds(), EveryMs: c.Every.Milliseconds(),
		Status: c.Status.String(), Err: c.Err, NowMs: c.Now, Limit: c.Limit}
	if c.Verb == "keys" && c.Status == abi.StatusOK {
		r.Keys = append([]string{}, c.Keys...) // [] for none: the reply had keys
	}
	switch c.Cond {
	case abi.CondNX:
		r.Cond = "NX"
	case abi.CondNEX:
		r.Cond = "NEX"
	}
	switch {
	case c.Verb == "get":
		r.Found = c.Found
		if c.Found {
			r.SetBytes(c.Result)
			r.Version = c.Version
		}
	case c.Value != nil || c.Verb == "set":
		r.SetBytes(c.Value)
	}
	if c.Verb == "set" || c.Verb == "lock" {
		r.Version = c.Version
	}
	return r
}

// request is the request part of a call record, to compare the calls of a
// replay with the recorded ones: two calls are the same request when
// their requests are equal.
func (r *Record) request() string {
	var b strings.Builder
	b.WriteString(r.Verb)
	if r.Key != "" {
		b.WriteString(" " + r.Key)
	}
	if r.Verb != "get" && (r.Value != nil || r.ValueB64 != nil) {
		b.WriteString(" " + strconv.Quote(string(r.Bytes())))
	}
	for _, o := range []struct {
		name string
		v    int64
	}{{"ttl", r.TTLMs}, {"wait", r.WaitMs}, {"every", r.EveryMs}} {
		if o.v != 0 {
			fmt.Fprintf(&b, " %s=%dms", o.name, o.v)
		}
	}
	if r.Cond != "" {
		b.WriteString(" " + r.Cond)
	}
	if r.Limit != 0 {
		fmt.Fprintf(&b, " limit=%d", r.Limit)
	}
	if r.Fence != "" {
		b.WriteString(" fence=" + r.Fence)
	}
	if r.Self {
		b.WriteString(" self")
	}
	return b.String()
}

// reply is the request with its recorded reply, for messages.
func (r *Record) reply() string {
	s := r.request() + " -> " + r.Status
	if r.Verb == "get" && r.Found {
		s += " " + strconv.Quote(string(r.Bytes()))
	}
	if r.Verb == "keys" && r.Keys != nil {
		s += fmt.Sprintf(" %d keys", len(r.Keys))
	}
	return s
}

// HostRecorder is a host.Recorder that writes a trace (format 2, source
// host). Its t_ms never go back: a reading older than the last record's
// (two rules' records crossing on their way to the file) is written with
// the last one's time. It stops at the first write error, which Err
// returns.
type HostRecorder struct {
	tw   *TraceWriter
	seed uint64 // of the rules' math.random (Rand), in the header

	mu   sync.Mutex
	last int64
	err  error
	n    int
}

var _ host.Recorder = (*HostRecorder)(nil)

// NewHostRecorder writes the header of a host trace starting at start on
// w.
func NewHostRecorder(w io.Writer, start time.Time) (*HostRecorder, error) {
	seed := rand.Uint64()
	tw, err := NewTraceWriter(w, TraceHeader{StartMs: start.UnixMilli(), Keys: []string{}, Source: SourceHost, Seed: seed})
	if err != nil {
		return nil, err
	}
	return &HostRecorder{tw: tw, seed: seed, last: start.UnixMilli()}, nil
}

// Rand is the lua.Config Rand of a recording host: each rule's math.random
// draws from a generator seeded with the trace's seed and the rule's file
// name, as its replay does (the package's Rand), so a replay draws the same
// numbers in the same order.
func (hr *HostRecorder) Rand(h abi.Host) *rand.Rand {
	rule, ok := host.RuleOf(h)
	if !ok {
		return nil
	}
	return ruleRand(hr.seed, rule)
}

// write appends r at atMs.
func (hr *HostRecorder) write(atMs int64, r Record) {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	if hr.err != nil {
		return
	}
	hr.last = max(hr.last, atMs)
	r.TMs = hr.last
	if hr.err = hr.tw.Write(r); hr.err == nil {
		hr.n++
	}
}

// RecordEvent implements host.Recorder.
func (hr *HostRecorder) RecordEvent(rule string, atMs int64, ev abi.Event) {
	r := Record{Kind: RecordEvent, Rule: rule, Key: ev.Key, Op: string(ev.Op), Version: ev.Version, Resync: ev.Resync, Late: ev.Late}
	if ev.Op == abi.OpSet || ev.Op == abi.OpTimer && ev.Value != nil {
		r.SetBytes(slices.Clone(ev.Value))
	}
	if ev.Op == abi.OpTimer {
		r.Deadline, r.Version = ev.Deadline, ""
	}
	hr.write(atMs, r)
}

// RecordCall implements host.Recorder.
func (hr *HostRecorder) RecordCall(rule string, atMs int64, c host.Call) {
	hr.write(atMs, callRecord(rule, c))
}

// RecordConnection implements host.Recorder.
func (hr *HostRecorder) RecordConnection(atMs int64, up bool) {
	kind := RecordDisconnected
	if up {
		kind = RecordConnected
	}
	hr.write(atMs, Record{Kind: kind})
}

// Err returns the first error writing the trace, if any.
func (hr *HostRecorder) Err() error {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return hr.err
}

// Records returns how many records were written after the header.
func (hr *HostRecorder) Records() int {
	hr.mu.Lock()
	defer hr.mu.Unlock()
	return hr.n
}
