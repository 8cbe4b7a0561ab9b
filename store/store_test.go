package store

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// recorder is an observer that keeps its notifications.
type recorder struct {
	id    string
	mu    sync.Mutex
	notes []Notification
}

func (r *recorder) ClientID() string { return r.id }
func (r *recorder) Notify(n Notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, n)
}
func (r *recorder) ops() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ops []string
	for _, n := range r.notes {
		ops = append(ops, string(n.Key)+" "+n.Op)
	}
	return strings.Join(ops, ",")
}

type clockT struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clockT) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clockT) advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func run(s *Store, o Observer, ts *string, args ...string) string {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return string(s.Execute(Request{Payload: resp.EncodeRequest(b...), TS: ts, ClientID: o.ClientID(), Observer: func() Observer { return o }}).Payload)
}

// An entry expires exactly once: whichever of lazy discovery or the reaper
// gets there first emits the single DELETE.
func TestExpiryEmitsOneDelete(t *testing.T) {
	clk := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	s := New(clk.now, Quota{Keys: -1, Bytes: -1})
	o := &recorder{id: "c"}
	ts := hlc.HLC{Wall: clk.now().UnixMilli(), Node: "c"}.String()
	run(s, o, nil, "KEYNOTIFY", "a")
	run(s, o, nil, "KEYNOTIFY", "b")
	run(s, o, &ts, "SET", "a", "v", "PX", "10")
	run(s, o, &ts, "SET", "b", "v", "PX", "20")
	clk.advance(15 * time.Millisecond)
	if got := run(s, o, nil, "GET", "a"); got != "$-1\r\n" { // lazy
		t.Fatalf("GET a: %q", got)
	}
	s.mu.Lock()
	next, ok := s.reapDue(clk.now())
	s.mu.Unlock()
	if !ok || next != 5*time.Millisecond {
		t.Fatalf("next deadline in %v (%v), want 5ms", next, ok)
	}
	clk.advance(5 * time.Millisecond)
	s.mu.Lock()
	_, ok = s.reapDue(clk.now()) // active
	s.mu.Unlock()
	if ok {
		t.Fatal("deadlines left after reaping everything")
	}
	run(s, o, nil, "GET", "a")
	run(s, o, nil, "GET", "b")
	if got, want := o.ops(), "a SET,b SET,a DELETE,b DELETE"; got != want {
		t.Fatalf("notifications %s, want %s", got, want)
	}
	if keys, bytes, _ := s.Stats(); keys != 0 || bytes != 0 {
		t.Fatalf("%d keys (%d bytes) left", keys, bytes)
	}
}

// A SET with a later deadline, or without one, replaces the old deadline.
func TestSetReplacesDeadline(t *testing.T) {
	clk := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	s := New(clk.now, Quota{Keys: -1, Bytes: -1})
	o := &recorder{id: "c"}
	ts := hlc.HLC{Wall: clk.now().UnixMilli(), Node: "c"}.String()
	run(s, o, &ts, "SET", "a", "v", "PX", "10")
	run(s, o, &ts, "SET", "a", "v", "PX", "100")
	run(s, o, &ts, "SET", "b", "v", "PX", "10")
	run(s, o, &ts, "SET", "b", "v")
	clk.advance(50 * time.Millisecond)
	if got := run(s, o, nil, "GET", "a"); got != "$1\r\nv\r\n" {
		t.Fatalf("GET a: %q", got)
	}
	if got := run(s, o, nil, "GET", "b"); got != "$1\r\nv\r\n" {
		t.Fatalf("GET b: %q", got)
	}
	if len(s.expiry) != 1 {
		t.Fatalf("%d deadlines, want 1", len(s.expiry))
	}
}

// A takeover registration survives the old observer being dropped.
func TestDropObserverKeepsNewerOwner(t *testing.T) {
	s := New(time.Now, Quota{Keys: -1, Bytes: -1})
	old, cur := &recorder{id: "same"}, &recorder{id: "same"}
	s.keyNotify(old, []byte("k"))
	s.keyNotify(old, []byte("only-old"))
	s.keyNotify(cur, []byte("k"))
	s.DropObserver(old)
	if _, _, regs := s.Stats(); regs != 1 {
		t.Fatalf("%d registrations, want 1", regs)
	}
	if s.watchers["k"]["same"] != cur {
		t.Fatal("the newer connection lost its registration")
	}
}

// FuzzExecute throws arbitrary payloads and __ts/__ft strings at the
// executor: it must never panic, always produce one well-formed RESP3
// reply, and never leave the store inconsistent.
func FuzzExecute(f *testing.F) {
	data, err := os.ReadFile("../protocol/resp/testdata/vectors.json")
	if err != nil {
		f.Fatal(err)
	}
	var v struct {
		Requests    []struct{ Wire string }
		BadRequests []struct{ Wire string } `json:"bad_requests"`
		Exchanges   []struct{ Request, TS, FT string }
	}
	if err := json.Unmarshal(data, &v); err != nil {
		f.Fatal(err)
	}
	now := time.UnixMilli(1_732_000_000_000)
	ts := hlc.HLC{Wall: now.UnixMilli(), Node: "c"}.String()
	for _, r := range v.Requests {
		f.Add([]byte(r.Wire), ts, "")
	}
	for _, r := range v.BadRequests {
		f.Add([]byte(r.Wire), ts, "")
	}
	for _, r := range v.Exchanges {
		f.Add([]byte(r.Request), r.TS, r.FT)
	}
	f.Add(resp.EncodeRequest([]byte("SET"), []byte("k"), []byte("v"), []byte("NX"), []byte("PX"), []byte("9223372036854775807")), ts, ts)
	f.Add(resp.EncodeRequest([]byte("SET"), []byte("k"), []byte("v")), "1732000000000:18446744073709551615:c", "")
	f.Add(resp.EncodeRequest([]byte("DEL"), []byte("k")), ts, "0:0:x")
	f.Add(resp.EncodeRequest([]byte("VDEL"), []byte("k"), []byte("v")), "", "1:2:3:4")
	f.Add(resp.EncodeRequest([]byte("KEYNOTIFY"), []byte("k"), []byte("STOP")), "", "")
	f.Add(resp.EncodeRequest([]byte("SET"), []byte("k"), []byte("v"), []byte("PX"), []byte("1.5")), ts, "")

	s := New(func() time.Time { return now }, Quota{Keys: 64, Bytes: -1})
	o := &recorder{id: "fuzz"}
	f.Fuzz(func(t *testing.T, payload []byte, ts, ft string) {
		req := Request{Payload: payload, ClientID: o.id, Observer: func() Observer { return o }}
		if ts != "" {
			req.TS = &ts
		}
		if ft != "" {
			req.FT = &ft
		}
		r := s.Execute(req)
		rep, err := resp.ParseReply(r.Payload)
		if err != nil {
			t.Fatalf("reply %q is not RESP3: %v", r.Payload, err)
		}
		if rep.Kind == resp.KindError && r.HasVersion {
			t.Fatalf("error reply %q with a version", r.Payload)
		}
		if r.HasVersion && (r.Version.Node != nodeID || r.Version.IsZero()) {
			t.Fatalf("reply version %v", r.Version)
		}
		if rep.Kind == resp.KindError && !knownErrText(string(rep.Str)) {
			t.Fatalf("unknown error text %q", rep.Str)
		}
		if keys, _, _ := s.Stats(); keys > 64 {
			t.Fatalf("%d keys over the quota", keys)
		}
		o.mu.Lock()
		o.notes = o.notes[:0]
		o.mu.Unlock()
	})
}

func knownErrText(s string) bool {
	switch s {
	case wire.ErrTextTimestampSkew, wire.ErrTextMissingFencingToken, wire.ErrTextFencingTokenSkew,
		wire.ErrTextFencingTokenLower, wire.ErrTextQuotaExceeded, wire.ErrTextSyntax,
		wire.ErrTextUnknownCommand, wire.ErrTextWrongNumberOfArgs, wire.ErrTextTimestampMissing,
		wire.ErrTextTimestampMalformed, wire.ErrTextKeyLengthZero:
		return true
	}
	return false
}

// A key's fencing token must not alias the request it came in: mochi's
// packet strings share the packet's buffer, which would keep every fenced
// request (its value included) alive for the key's lifetime.
func TestFencingTokenDoesNotRetainTheRequest(t *testing.T) {
	s := New(time.Now, Quota{Keys: -1, Bytes: -1})
	packet := []byte("padding:" + hlc.HLC{Wall: time.Now().UnixMilli(), Node: "writer"}.String() + ":more padding")
	ftText := unsafe.String(&packet[8], len(packet)-8-len(":more padding")) // aliases packet, as mochi's strings do
	ft, err := hlc.Parse(ftText)
	if err != nil {
		t.Fatal(err)
	}
	ts := hlc.HLC{Wall: time.Now().UnixMilli(), Node: "writer"}
	if _, _, err := s.set(setArgs{key: []byte("k"), value: []byte("v"), ts: ts, ft: &ft}); err != nil {
		t.Fatal(err)
	}
	node := unsafe.StringData(s.entries["k"].fence.Node)
	start, end := uintptr(unsafe.Pointer(&packet[0])), uintptr(unsafe.Pointer(&packet[len(packet)-1]))
	if p := uintptr(unsafe.Pointer(node)); p >= start && p <= end {
		t.Fatal("the stored fencing token points into the request's buffer")
	}
}
