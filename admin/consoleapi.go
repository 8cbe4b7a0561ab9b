package admin

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/protocol"
)

// The console's JSON API, under /console/api/: what its pages draw. Every
// handler only reads.

// ConsoleSource is what the console shows of the host: a *host.Host.
type ConsoleSource interface {
	StatusSource
	WhySource
	WhyNotSource
	Timers(path string) ([]host.TimerInfo, bool)
	Group() (host.GroupStatus, bool)
}

// KeySource browses the store: a *protocol.Client.
type KeySource interface {
	ScanPage(ctx context.Context, pattern, token []byte, opts protocol.ScanOptions) (keys [][]byte, next []byte, err error)
	Get(ctx context.Context, key []byte, opts protocol.CallOptions) (protocol.GetResult, error)
}

// Bounds of the keys page.
const (
	maxKeysListed  = 500
	keysTimeout    = 5 * time.Second
	maxValueShown  = 4096
	percentileRuns = "of the runs kept (at most %d per outcome)"
)

// RulePageDoc is GET /console/api/rule?name=R: the rule's status, its
// permissions, pending timers and recent runs per outcome.
type RulePageDoc struct {
	Rule        RuleDoc             `json:"rule"`
	Permissions map[string][]string `json:"permissions"` // read, write, watch, lock; absent: every key
	Timers      []TimerDoc          `json:"timers"`
	Runs        map[string][]Entry  `json:"runs"`
	Latency     LatencyDoc          `json:"latency"`
}

// LatencyDoc is the handling time of the runs the console keeps of a rule.
type LatencyDoc struct {
	P50MS float64 `json:"p50_ms"`
	P99MS float64 `json:"p99_ms"`
	Of    string  `json:"of"`
}

// TimerDoc is a pending timer.
type TimerDoc struct {
	Rule        string     `json:"rule"`
	Name        string     `json:"name"`
	Due         *time.Time `json:"due,omitempty"` // absent while held for a version not yet live
	EveryMS     int64      `json:"every_ms,omitempty"`
	PayloadSize int        `json:"payload_size"`
	Firing      bool       `json:"firing,omitempty"`
}

// KeysDoc is GET /console/api/keys?pattern=P[&reserved=1][&after=T]: a
// page of the keys, without the host's own (under $ssrun/) unless
// reserved=1.
type KeysDoc struct {
	Pattern string   `json:"pattern"`
	Keys    []string `json:"keys"`
	More    bool     `json:"more"` // more keys follow: see Next
	// Next is the after= of the next page (empty on the last).
	Next string `json:"next,omitempty"`
	// Hidden counts the keys under $ssrun/ left out of this page.
	Hidden int `json:"hidden,omitempty"`
}

// keysQuery reads a keys page's pattern and whether it shows the host's
// own keys; ok=false once it has answered 400.
func keysQuery(w http.ResponseWriter, r *http.Request) (pattern string, reserved, ok bool) {
	pattern = r.URL.Query().Get("pattern")
	if pattern == "" {
		pattern = "*"
	}
	if len(pattern) > MaxFilter {
		writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: fmt.Sprintf("a pattern is at most %d bytes", MaxFilter)})
		return "", false, false
	}
	return pattern, r.URL.Query().Get("reserved") == "1", true
}

// add lists key on d, or counts it hidden.
func (d *KeysDoc) add(key []byte, reserved bool) {
	if !reserved && bytes.HasPrefix(key, []byte(host.ReservedPrefix)) {
		d.Hidden++
		return
	}
	d.Keys = append(d.Keys, string(key))
}

// KeyDoc is GET /console/api/key?key=K: its value (text when it is UTF-8,
// else hex; at most maxValueShown bytes), version and last writer rule.
type KeyDoc struct {
	Key       string            `json:"key"`
	Found     bool              `json:"found"`
	Value     string            `json:"value"`
	Hex       bool              `json:"hex,omitempty"`
	Size      int               `json:"size"`
	Truncated bool              `json:"truncated,omitempty"`
	Version   string            `json:"version,omitempty"`
	LastWrite *provenance.Write `json:"last_write,omitempty"`
	// Writer, on the broker's console, is the client id of the SET of
	// this version (empty when the store does not know it: written
	// before the broker started).
	Writer string `json:"writer,omitempty"`
}

// GroupDoc is GET /console/api/group.
type GroupDoc struct {
	InGroup bool              `json:"in_group"`
	Group   *host.GroupStatus `json:"group,omitempty"`
}

func (c *Console) rulesHandler(src ConsoleSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		type ruleRow struct {
			RuleDoc
			Latency LatencyDoc `json:"latency"`
		}
		doc := NewStatusDoc(src)
		rows := make([]ruleRow, 0, len(doc.Rules))
		names := make([]string, 0, len(doc.Rules))
		for _, rd := range doc.Rules {
			rows = append(rows, ruleRow{RuleDoc: rd, Latency: c.latency(rd.Name)})
			names = append(names, rd.Name)
		}
		c.keepOnly(names)
		out := map[string]any{"rules": rows, "host": doc.Host, "dry_run": src.DryRun()}
		if g, ok := src.Group(); ok {
			out["owned"], out["standby"] = nonNil(g.Owned), nonNil(g.Standby)
		}
		writeJSON(w, http.StatusOK, out)
	})
}

func (c *Console) ruleHandler(src ConsoleSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := r.URL.Query().Get("name")
		for _, rd := range NewStatusDoc(src).Rules {
			if rd.Name != name {
				continue
			}
			doc := RulePageDoc{Rule: rd, Permissions: map[string][]string{}, Runs: c.Runs(name), Latency: c.latency(name)}
			if cfg, ok := src.RuleConfigOf(rd.Path); ok {
				for k, v := range map[string][]string{"read": cfg.Read, "write": cfg.Write, "watch": cfg.Watch, "lock": cfg.Lock} {
					if v != nil {
						doc.Permissions[k] = v
					}
				}
			}
			doc.Timers = timerDocs(src, rd)
			writeJSON(w, http.StatusOK, doc)
			return
		}
		writeJSON(w, http.StatusNotFound, ErrorDoc{Error: fmt.Sprintf("no rule %q is loaded", name)})
	})
}

// latency returns the median and 99th percentile handling time of the runs
// of rule the console keeps.
func (c *Console) latency(rule string) LatencyDoc {
	var ms []float64
	for o, es := range c.Runs(rule) {
		if o == OutcomeDropped || o == OutcomeSkipped {
			continue
		}
		for _, e := range es {
			ms = append(ms, e.TookMS)
		}
	}
	d := LatencyDoc{Of: fmt.Sprintf(percentileRuns, c.cfg.PerOutcome)}
	if len(ms) == 0 {
		return d
	}
	slices.Sort(ms)
	d.P50MS, d.P99MS = ms[(len(ms)-1)/2], ms[(len(ms)-1)*99/100]
	return d
}

func timerDocs(src ConsoleSource, rd RuleDoc) []TimerDoc {
	ts, _ := src.Timers(rd.Path)
	out := make([]TimerDoc, 0, len(ts))
	for _, t := range ts {
		d := TimerDoc{Rule: rd.Name, Name: t.Name, EveryMS: t.Every.Milliseconds(), PayloadSize: t.PayloadSize, Firing: t.Firing}
		if !t.Due.IsZero() {
			due := t.Due.UTC()
			d.Due = &due
		}
		out = append(out, d)
	}
	return out
}

func timersHandler(src ConsoleSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		out := []TimerDoc{}
		for _, rd := range NewStatusDoc(src).Rules {
			out = append(out, timerDocs(src, rd)...)
		}
		writeJSON(w, http.StatusOK, map[string]any{"timers": out})
	})
}

func groupHandler(src ConsoleSource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g, ok := src.Group()
		doc := GroupDoc{InGroup: ok}
		if ok {
			doc.Group = &g
		}
		writeJSON(w, http.StatusOK, doc)
	})
}

func (c *Console) eventsHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, err := parseFilter(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: err.Error()})
			return
		}
		out := []Entry{}
		for _, e := range c.Recent() {
			if f.match(e) {
				out = append(out, e)
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"entries": out})
	})
}

// scanPage reads one SCAN page of a store (KeySource.ScanPage): the
// host's connection, or the broker's own store.
type scanPage func(ctx context.Context, pattern, token []byte) (keys [][]byte, next []byte, err error)

// keysHandler serves a page of the store's keys, for both consoles: SCAN
// pages from after= (the previous page's next, the store's token in
// base64url) until it holds maxKeysListed keys, the store's last page or
// maxScanPages; sorted. where names the store in the error of an after=
// it refuses.
func keysHandler(scan scanPage, where string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pattern, reserved, ok := keysQuery(w, r)
		if !ok {
			return
		}
		var token []byte
		if after := r.URL.Query().Get("after"); after != "" {
			var err error
			if token, err = base64.RawURLEncoding.DecodeString(after); err != nil || len(token) == 0 {
				writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "after= is the next of a keys page"})
				return
			}
		}
		ctx, cancel := context.WithTimeout(r.Context(), keysTimeout)
		defer cancel()
		doc := KeysDoc{Pattern: pattern, Keys: []string{}}
		for range maxScanPages {
			keys, next, err := scan(ctx, []byte(pattern), token)
			if err != nil && token != nil {
				writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "after= is not a page of " + pattern + " on " + where + " (restarted since?): " + err.Error()})
				return
			}
			if err != nil {
				writeJSON(w, http.StatusBadGateway, ErrorDoc{Error: "scan " + pattern + ": " + err.Error()})
				return
			}
			for _, k := range keys {
				doc.add(k, reserved)
			}
			token = next
			if next == nil || len(doc.Keys) >= maxKeysListed {
				break
			}
		}
		if token != nil {
			doc.More, doc.Next = true, base64.RawURLEncoding.EncodeToString(token)
		}
		slices.Sort(doc.Keys)
		writeJSON(w, http.StatusOK, doc)
	})
}

// keyHandler serves a key; src, nil on the broker's console, names the
// rule that last wrote it.
func keyHandler(ks KeySource, src WhySource) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("key")
		doc, ok := keyDoc(w, r, ks, key)
		if !ok {
			return
		}
		if src != nil {
			if wr, ok := src.Why(key); ok {
				doc.LastWrite = &wr
			}
		}
		writeJSON(w, http.StatusOK, doc)
	})
}

// keyDoc reads key from ks; ok=false once it has answered 400 (no key)
// or 502.
func keyDoc(w http.ResponseWriter, r *http.Request, ks KeySource, key string) (doc KeyDoc, ok bool) {
	if key == "" {
		writeJSON(w, http.StatusBadRequest, ErrorDoc{Error: "missing the key parameter: /console/api/key?key=KEY"})
		return KeyDoc{}, false
	}
	ctx, cancel := context.WithTimeout(r.Context(), keysTimeout)
	defer cancel()
	res, err := ks.Get(ctx, []byte(key), protocol.CallOptions{})
	if err != nil {
		writeJSON(w, http.StatusBadGateway, ErrorDoc{Error: "get " + key + ": " + err.Error()})
		return KeyDoc{}, false
	}
	doc = KeyDoc{Key: key, Found: res.Found, Size: len(res.Value)}
	if res.Found {
		doc.Version = res.Version.String()
		v := res.Value
		if len(v) > maxValueShown {
			v, doc.Truncated = v[:maxValueShown], true
		}
		if utf8.Valid(v) {
			doc.Value = string(v)
		} else {
			doc.Value, doc.Hex = hex.EncodeToString(v), true
		}
	}
	return doc, true
}
