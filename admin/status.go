package admin

import (
	"encoding/json"
	"net/http"
	"path/filepath"
	"time"

	"github.com/ssrun/ssrun/host"
)

// StatusSource is what the status document is made of: a *host.Host.
type StatusSource interface {
	Status() []host.RuleStatus
	Stats() host.Stats
}

// StatusDoc is the JSON document of GET /status (and `ssrun status -o
// json`).
type StatusDoc struct {
	Rules []RuleDoc `json:"rules"`
	Host  HostDoc   `json:"host"`
}

// RuleDoc is one rule in StatusDoc: host.RuleStatus with JSON names.
type RuleDoc struct {
	Name  string `json:"name"` // the file name, as in logs
	Path  string `json:"path"`
	Kind  string `json:"kind"`
	Hash  string `json:"hash"`  // the first 12 hex digits of the running version's SHA-256
	State string `json:"state"` // running, disabled, stuck, "reload failed: previous version runs", "failed to load"
	// LastError and LastErrorAt: the last handler or load failure.
	LastError   string     `json:"last_error,omitempty"`
	LastErrorAt *time.Time `json:"last_error_at,omitempty"`
	// NextRetry, for a rule file whose start failed, is when the host
	// loads it again (host.RuleStatus.NextRetry).
	NextRetry *time.Time `json:"next_retry,omitempty"`
	Handled   uint64     `json:"handled"`
	Failed    uint64     `json:"failed"`
	Dropped   uint64     `json:"dropped"`
	Coalesced uint64     `json:"coalesced"` // changes replaced in a full mailbox by a newer change of their key
	Restarted uint64     `json:"restarted"` // calls cut by a newer change of their key (mode restart)
	Echoes    uint64     `json:"echoes"`
	Abandoned uint64     `json:"abandoned"`
	// Queued is the mailbox depth (absent for a file that failed to load).
	Queued *int `json:"queued,omitempty"`
	// InFlight is how many handler calls of the rule run now (up to its
	// concurrency).
	InFlight int      `json:"in_flight"`
	Watches  []string `json:"watches"`
	// Patterns are the patterns the rule watches (watch_pattern), and
	// PatternKeys how many keys they cover.
	Patterns           []string `json:"patterns,omitempty"`
	PatternKeys        int      `json:"pattern_keys,omitempty"`
	Locks              []string `json:"locks"`
	Timers             int      `json:"timers"`
	LogLinesSuppressed uint64   `json:"log_lines_suppressed"`
	LogBytesSuppressed uint64   `json:"log_bytes_suppressed"`
}

// HostDoc is the host-wide part of StatusDoc: host.Stats with JSON names.
type HostDoc struct {
	Notifications uint64 `json:"notifications"`
	LoopsDamped   uint64 `json:"loops_damped"`
	Resyncs       uint64 `json:"resyncs"`
	LoadRetries   uint64 `json:"load_retries"`
	WatchedKeys   int    `json:"watched_keys"`
	Stuck         int    `json:"stuck"`
	Timers        int    `json:"timers"`
	// Patterns: the pattern watches' counters (host.PatternStats).
	Patterns *PatternsDoc `json:"patterns,omitempty"`
	// Owned and Standby count, for a host in a group (ssrun run --group),
	// the shared rules it runs and those another host runs (their state is
	// "standby: ...").
	Owned   int `json:"owned,omitempty"`
	Standby int `json:"standby,omitempty"`
	// Withdrawn counts the shared rules whose version here failed to load
	// and which this host no longer offers, another member offering them
	// (they run there; their state here is the load failure).
	Withdrawn int `json:"withdrawn,omitempty"`
}

// PatternsDoc is host.PatternStats with JSON names (absent while no rule
// used a pattern).
type PatternsDoc struct {
	Watched    int    `json:"watched"`
	Scans      uint64 `json:"scans"`
	Pages      uint64 `json:"pages"`
	FoundLate  uint64 `json:"found_late"`
	OverLimit  uint64 `json:"over_limit"`
	ScanErrors uint64 `json:"scan_errors"`
}

// NewStatusDoc builds the status document of src.
func NewStatusDoc(src StatusSource) StatusDoc {
	rs := src.Status()
	doc := StatusDoc{Rules: make([]RuleDoc, 0, len(rs))}
	for _, s := range rs {
		d := RuleDoc{Name: filepath.Base(s.Path), Path: s.Path, Kind: s.Kind, Hash: s.Hash, State: s.State,
			LastError: s.LastError, Handled: s.Handled, Failed: s.Failed, Dropped: s.Dropped, Echoes: s.Echoes,
			Coalesced: s.Coalesced, Restarted: s.Restarted, InFlight: s.InFlight,
			Abandoned: s.Abandoned, Watches: nonNil(s.Watches), Patterns: s.Patterns, PatternKeys: s.PatternKeys, Locks: nonNil(s.Locks), Timers: s.Timers,
			LogLinesSuppressed: s.LogLinesSuppressed, LogBytesSuppressed: s.LogBytesSuppressed}
		if s.State != host.StateLoadFailed {
			q := s.Queued
			d.Queued = &q
		}
		if !s.LastErrorAt.IsZero() {
			at := s.LastErrorAt.UTC()
			d.LastErrorAt = &at
		}
		if !s.NextRetry.IsZero() {
			at := s.NextRetry.UTC()
			d.NextRetry = &at
		}
		doc.Rules = append(doc.Rules, d)
	}
	st := src.Stats()
	doc.Host = HostDoc{Notifications: st.Notifications, LoopsDamped: st.LoopsDamped, Resyncs: st.Resyncs, LoadRetries: st.LoadRetries,
		WatchedKeys: st.WatchedKeys, Stuck: st.Stuck, Timers: st.Timers, Owned: st.Owned, Standby: st.Standby, Withdrawn: st.Withdrawn}
	if p := st.Patterns; p != (host.PatternStats{}) {
		doc.Host.Patterns = &PatternsDoc{Watched: p.Patterns, Scans: p.Scans, Pages: p.Pages, FoundLate: p.FoundLate, OverLimit: p.OverLimit, ScanErrors: p.ScanErrors}
	}
	return doc
}

// StatusHandler serves GET /status: the StatusDoc of src, as JSON.
func StatusHandler(src StatusSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !onlyGet(w, r) {
			return
		}
		writeJSON(w, http.StatusOK, NewStatusDoc(src))
	})
}

// ErrorDoc is the body of an error answer: {"error": "..."}.
type ErrorDoc struct {
	Error string `json:"error"`
}

// onlyGet answers 405 to anything but GET and HEAD, and reports whether
// the request may go on.
func onlyGet(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	writeJSON(w, http.StatusMethodNotAllowed, ErrorDoc{Error: r.Method + " not allowed: use GET"})
	return false
}

// writeJSON writes v as an indented JSON answer with status code.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client went away: nothing to do
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
