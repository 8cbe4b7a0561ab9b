package admin_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
)

type fakeHost struct {
	rules  []host.RuleStatus
	stats  host.Stats
	writes map[string]provenance.Write
}

func (f fakeHost) Status() []host.RuleStatus { return f.rules }
func (f fakeHost) Stats() host.Stats         { return f.stats }
func (f fakeHost) Why(key string) (provenance.Write, bool) {
	w, ok := f.writes[key]
	return w, ok
}

// get serves a GET of target by h and decodes the JSON answer into v.
func get(t *testing.T, h http.Handler, target string, v any) int {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, target, nil))
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s: Content-Type %q", target, ct)
	}
	if err := json.Unmarshal(rec.Body.Bytes(), v); err != nil {
		t.Fatalf("%s: %v\n%s", target, err, rec.Body)
	}
	return rec.Code
}

func TestStatusDocument(t *testing.T) {
	at := time.Date(2026, 11, 23, 15, 4, 5, 0, time.FixedZone("CET", 3600))
	src := fakeHost{
		rules: []host.RuleStatus{
			{Path: "/rules/a.lua", Kind: "lua", Hash: "0123456789ab", State: host.StateRunning, Handled: 7, Failed: 2, Dropped: 1,
				Coalesced: 6, Restarted: 2, Echoes: 3, Watches: []string{"k"}, Locks: []string{"l"}, Timers: 4, Queued: 5, LastError: "error SET \"k\": boom", LastErrorAt: at},
			{Path: "/rules/b.wasm", Kind: "wasm", Hash: "ba9876543210", State: host.StateLoadFailed, LastError: "start b.wasm: not ready", LastErrorAt: at,
				NextRetry: at.Add(2 * time.Second)},
		},
		stats: host.Stats{Notifications: 11, LoopsDamped: 1, WatchedKeys: 1, Timers: 4, LoadRetries: 6},
	}
	var doc map[string]any
	if code := get(t, admin.StatusHandler(src), "/status", &doc); code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	rules := doc["rules"].([]any)
	a, b := rules[0].(map[string]any), rules[1].(map[string]any)
	want := map[string]any{"name": "a.lua", "path": "/rules/a.lua", "kind": "lua", "hash": "0123456789ab", "state": "running",
		"handled": 7.0, "failed": 2.0, "dropped": 1.0, "coalesced": 6.0, "restarted": 2.0, "in_flight": 0.0, "echoes": 3.0, "abandoned": 0.0, "watches": []any{"k"}, "locks": []any{"l"},
		"timers": 4.0, "queued": 5.0, "last_error": "error SET \"k\": boom", "last_error_at": "2026-11-23T14:04:05Z",
		"log_lines_suppressed": 0.0, "log_bytes_suppressed": 0.0}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("rule a:\n got %v\nwant %v", a, want)
	}
	if b["state"] != "failed to load" || b["hash"] != "ba9876543210" || b["last_error"] != "start b.wasm: not ready" || b["next_retry"] != "2026-11-23T14:04:07Z" ||
		!reflect.DeepEqual(b["watches"], []any{}) || !reflect.DeepEqual(b["locks"], []any{}) || b["queued"] != nil {
		t.Errorf("rule b: %v", b)
	}
	if h := doc["host"].(map[string]any); h["notifications"] != 11.0 || h["loops_damped"] != 1.0 || h["watched_keys"] != 1.0 || h["timers"] != 4.0 || h["load_retries"] != 6.0 {
		t.Errorf("host: %v", h)
	}

	// No error: no error fields; no rules: an empty list, not null.
	var typed admin.StatusDoc
	get(t, admin.StatusHandler(fakeHost{rules: []host.RuleStatus{{Path: "c.lua", State: host.StateRunning}}}), "/status", &typed)
	if r := typed.Rules[0]; r.LastError != "" || r.LastErrorAt != nil {
		t.Errorf("a rule without error: %+v", r)
	}
	rec := httptest.NewRecorder()
	admin.StatusHandler(fakeHost{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/status", nil))
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(rec.Body.Bytes(), &raw); err != nil || string(raw["rules"]) != "[]" {
		t.Errorf("no rules: %s (%v)", raw["rules"], err)
	}
}

func TestOnlyGet(t *testing.T) {
	for _, h := range []http.Handler{admin.StatusHandler(fakeHost{}), admin.WhyHandler(fakeHost{})} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/x?key=k", nil))
		if rec.Code != http.StatusMethodNotAllowed || rec.Header().Get("Allow") != "GET, HEAD" {
			t.Errorf("POST: %d, Allow %q", rec.Code, rec.Header().Get("Allow"))
		}
	}
}

// A host in a group reports how many shared rules it owns and how many
// another host runs; a host in none leaves both out.
func TestStatusDocumentGroupCounts(t *testing.T) {
	doc := admin.NewStatusDoc(fakeHost{stats: host.Stats{Owned: 3, Standby: 7, Withdrawn: 2},
		rules: []host.RuleStatus{{Path: "/r/a.lua", State: host.StateStandby}}})
	if doc.Host.Owned != 3 || doc.Host.Standby != 7 || doc.Host.Withdrawn != 2 || doc.Rules[0].State != host.StateStandby {
		t.Fatalf("group counts: %+v, rule %+v", doc.Host, doc.Rules[0])
	}
	b, err := json.Marshal(admin.NewStatusDoc(fakeHost{}))
	if err != nil {
		t.Fatal(err)
	}
	var m struct{ Host map[string]any }
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"owned", "standby", "withdrawn"} {
		if _, ok := m.Host[k]; ok {
			t.Fatalf("a host in no group reports %s: %s", k, b)
		}
	}
}
