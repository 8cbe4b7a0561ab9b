package testrun

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/ssrun/ssrun/internal/safefile"
)

// TraceFormat is the version of the trace format written by TraceWriter.
// ReadTrace reads it and format 1 (written by ssrun record before host
// traces existed: the same records, without the host's kinds).
const TraceFormat = 2

// A trace (`ssrun record`, read by `ssrun replay`) is JSON lines. The first
// line is the header:
//
//	{"ssrun_trace":1,"start_ms":1767225600000,"keys":["thermostat1/setPoint"]}
//
// then one record per line, in the order the recorder saw them, each with
// its clock reading t_ms (Unix ms, never decreasing):
//
//	{"t_ms":…,"kind":"get","key":"k","found":true,"value":"20","version":"…"}
//	{"t_ms":…,"kind":"notify","key":"k","op":"SET","value":"21","version":"…"}
//	{"t_ms":…,"kind":"notify","key":"k","op":"DELETE","version":"…"}
//	{"t_ms":…,"kind":"disconnected"}  {"t_ms":…,"kind":"connected"}
//
// A trace recorded inside a host (`ssrun dev --record`, HostRecorder) has
// "source":"host" in its header and holds what the host's rules saw
// instead of get and notify records (trace_host.go): each event a rule
// handled, each host call it made with the reply, and the connection:
//
//	{"t_ms":…,"kind":"event","rule":"r.lua","key":"k","op":"SET","value":"21","version":"…"}
//	{"t_ms":…,"kind":"event","rule":"r.lua","key":"t","op":"TIMER","value":"p","deadline":…,"late":true}
//	{"t_ms":…,"kind":"call","rule":"r.lua","verb":"set","key":"k","value":"28","fence":"l","status":"FENCED","error":"…"}
//	{"t_ms":…,"kind":"call","rule":"r.lua","verb":"lock","key":"l","ttl_ms":3000,"status":"OK","version":"…"}
//	{"t_ms":…,"kind":"call","rule":"r.lua","verb":"now","now_ms":…,"status":"OK"}
//
// A value that is not UTF-8 is in value_b64 (base64) instead of value.
// Every line is written with one write and ends with a newline, so a
// recorder killed mid-write loses at most its last line: a last line
// without its newline is dropped by ReadTrace (TraceData.Truncated), any
// other bad line is refused with its file and line number.

// TraceHeader is a trace's first line.
type TraceHeader struct {
	Format  int      `json:"ssrun_trace"`
	StartMs int64    `json:"start_ms"`
	Keys    []string `json:"keys"`
	// Source is SourceHost for a trace recorded inside a host, empty for
	// one of `ssrun record`.
	Source string `json:"source,omitempty"`
	// Seed, in a host trace, is the seed of the recording host's Lua
	// math.random (see Rand): a replay draws the same numbers.
	Seed uint64 `json:"seed,omitempty"`
}

// SourceHost is TraceHeader.Source of a trace recorded inside a host.
const SourceHost = "host"

// Record kinds.
const (
	RecordGet          = "get"
	RecordNotify       = "notify"
	RecordConnected    = "connected"
	RecordDisconnected = "disconnected"
	RecordEvent        = "event" // host traces: an event a rule handled
	RecordCall         = "call"  // host traces: a host call of a rule, with its reply
)

// Record is one line of a trace after the header.
type Record struct {
	TMs      int64   `json:"t_ms"`
	Kind     string  `json:"kind"`
	Key      string  `json:"key,omitempty"`
	Op       string  `json:"op,omitempty"` // notify: SET or DELETE
	Found    bool    `json:"found,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueB64 []byte  `json:"value_b64,omitempty"`
	Version  string  `json:"version,omitempty"`

	// Host traces (kinds event and call).
	Rule     string   `json:"rule,omitempty"`
	Deadline int64    `json:"deadline,omitempty"` // event TIMER
	Late     bool     `json:"late,omitempty"`     // event TIMER
	Resync   bool     `json:"resync,omitempty"`   // event SET, DELETE
	Verb     string   `json:"verb,omitempty"`     // call: get, set, ... (see callVerbs)
	Cond     string   `json:"cond,omitempty"`     // set: NX or NEX
	TTLMs    int64    `json:"ttl_ms,omitempty"`   // set's ttl, lock's lease, timer's delay
	WaitMs   int64    `json:"wait_ms,omitempty"`  // lock
	EveryMs  int64    `json:"every_ms,omitempty"` // timer
	Fence    string   `json:"fence,omitempty"`    // set, del, vdel
	Self     bool     `json:"self,omitempty"`     // watch, watch_pattern
	Limit    int      `json:"limit,omitempty"`    // keys: its limit (0: the default)
	Keys     []string `json:"keys,omitempty"`     // keys: the reply's keys
	NowMs    int64    `json:"now_ms,omitempty"`   // now: the reading
	Status   string   `json:"status,omitempty"`   // call: the reply's status
	Err      string   `json:"error,omitempty"`    // call: the reply's message, when not OK

	Line int `json:"-"` // in the file, from 1 (the header)
}

// Bytes returns the record's value.
func (r *Record) Bytes() []byte {
	if r.Value != nil {
		return []byte(*r.Value)
	}
	return r.ValueB64
}

// SetBytes stores v as value (UTF-8, or empty) or value_b64.
func (r *Record) SetBytes(v []byte) {
	if utf8.Valid(v) {
		s := string(v)
		r.Value = &s
		return
	}
	r.ValueB64 = v
}

// TraceData is a parsed trace.
type TraceData struct {
	Path      string
	Header    TraceHeader
	Records   []Record
	Truncated bool // the last line had no newline and was dropped
}

// maxTraceLine bounds one line of a trace (a value is at most a few MB).
const maxTraceLine = 64 << 20

// MaxTraceBytes bounds a trace file; a larger one is refused. Its records
// are held in memory for the replay.
const MaxTraceBytes = 2 << 30

// ReadTrace reads the trace at path. What is not a regular file (a named
// pipe, a device) or is larger than MaxTraceBytes is refused.
func ReadTrace(path string) (*TraceData, error) {
	f, err := safefile.Open(path, MaxTraceBytes)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	defer f.Close()
	return ParseTrace(path, f)
}

// ParseTrace parses a trace from r; name is used in errors.
func ParseTrace(name string, r io.Reader) (*TraceData, error) {
	br := bufio.NewReaderSize(r, 64<<10)
	t := &TraceData{Path: name}
	lastT := int64(0)
	for n := 1; ; n++ {
		line, err := readLine(br)
		if errors.Is(err, io.EOF) {
			if len(line) > 0 {
				t.Truncated = true // a kill during the last write
			}
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		fail := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", name, n, fmt.Sprintf(format, args...))
		}
		if n == 1 {
			if err := strictJSON(line, &t.Header); err != nil {
				return nil, fail("not a trace header: %v", err)
			}
			if t.Header.Format != 1 && t.Header.Format != TraceFormat {
				return nil, fail("trace format %d, this ssrun reads formats 1 and %d", t.Header.Format, TraceFormat)
			}
			if t.Header.Source != "" && (t.Header.Source != SourceHost || t.Header.Format < 2) {
				return nil, fail("trace source %q, want %q (format 2) or none", t.Header.Source, SourceHost)
			}
			if t.Header.Seed != 0 && t.Header.Source != SourceHost {
				return nil, fail("a seed in a trace without \"source\":%q", SourceHost)
			}
			lastT = t.Header.StartMs
			continue
		}
		var rec Record
		if err := strictJSON(line, &rec); err != nil {
			return nil, fail("%v", err)
		}
		rec.Line = n
		if rec.TMs < lastT {
			return nil, fail("t_ms %d goes back in time (previous %d)", rec.TMs, lastT)
		}
		lastT = rec.TMs
		if err := rec.check(t.Header.Source == SourceHost); err != nil {
			return nil, fail("%v", err)
		}
		t.Records = append(t.Records, rec)
	}
	if t.Header.Format == 0 {
		return nil, fmt.Errorf("%s:1: empty trace (no header)", name)
	}
	return t, nil
}

// readLine returns the next line without its newline; io.EOF with the
// partial last line when the input ends without one.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > maxTraceLine {
			return nil, fmt.Errorf("line longer than %d bytes", maxTraceLine)
		}
		buf = append(buf, chunk...)
		switch {
		case err == nil:
			return buf[:len(buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return buf, err
		}
	}
}

// strictJSON decodes one JSON object into v, refusing unknown fields and
// anything after it.
func strictJSON(line []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value on the line")
	}
	return nil
}

// check validates the fields of a record for its kind, in a host trace or
// one of ssrun record.
func (r *Record) check(fromHost bool) error {
	if r.Value != nil && r.ValueB64 != nil {
		return errors.New("both value and value_b64")
	}
	hostKind := r.Kind == RecordEvent || r.Kind == RecordCall
	switch {
	case !hostKind && r.Kind != RecordGet && r.Kind != RecordNotify && r.Kind != RecordConnected && r.Kind != RecordDisconnected:
		return fmt.Errorf("unknown record kind %q", r.Kind)
	case fromHost && (r.Kind == RecordGet || r.Kind == RecordNotify):
		return fmt.Errorf("a %s record in a trace recorded inside a host", r.Kind)
	case !fromHost && hostKind:
		return fmt.Errorf("a %s record in a trace without \"source\":%q", r.Kind, SourceHost)
	case hostKind:
		return r.checkHost()
	case r.Rule != "" || r.Verb != "" || r.Status != "" || r.Err != "" || r.Deadline != 0 || r.Late || r.Resync ||
		r.Cond != "" || r.TTLMs != 0 || r.WaitMs != 0 || r.EveryMs != 0 || r.Fence != "" || r.Self || r.NowMs != 0:
		return fmt.Errorf("%s record with fields of a host trace", r.Kind)
	}
	switch r.Kind {
	case RecordGet:
		if r.Key == "" {
			return errors.New("get without a key")
		}
		if r.Found != (r.Value != nil || r.ValueB64 != nil) {
			return errors.New("get: found and the value disagree")
		}
	case RecordNotify:
		if r.Key == "" {
			return errors.New("notify without a key")
		}
		switch r.Op {
		case "SET":
			if r.Value == nil && r.ValueB64 == nil {
				return errors.New("notify SET without a value")
			}
		case "DELETE":
			if r.Value != nil || r.ValueB64 != nil {
				return errors.New("notify DELETE with a value")
			}
		default:
			return fmt.Errorf("notify op %q, want SET or DELETE", r.Op)
		}
	case RecordConnected, RecordDisconnected:
	default:
		return fmt.Errorf("unknown record kind %q", r.Kind)
	}
	return nil
}

// TraceWriter writes a trace, one line per write call.
type TraceWriter struct {
	mu sync.Mutex
	w  io.Writer
}

// NewTraceWriter writes h as the header of a trace on w.
func NewTraceWriter(w io.Writer, h TraceHeader) (*TraceWriter, error) {
	h.Format = TraceFormat
	tw := &TraceWriter{w: w}
	if err := tw.line(h); err != nil {
		return nil, err
	}
	return tw, nil
}

// Write appends r.
func (tw *TraceWriter) Write(r Record) error { return tw.line(r) }

func (tw *TraceWriter) line(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	tw.mu.Lock()
	defer tw.mu.Unlock()
	if _, err := tw.w.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}
