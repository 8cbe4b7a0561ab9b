package broker

import (
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/crypto/bcrypt"

	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// recorder is an observer that keeps its notifications.
type recorder struct {
	id    string
	mu    sync.Mutex
	notes []notification
}

func (r *recorder) clientID() string { return r.id }
func (r *recorder) notify(n notification) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.notes = append(r.notes, n)
}
func (r *recorder) ops() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ops []string
	for _, n := range r.notes {
		ops = append(ops, string(n.key)+" "+n.op)
	}
	return strings.Join(ops, ",")
}

type clockT struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clockT) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clockT) advance(d time.Duration) { c.mu.Lock(); defer c.mu.Unlock(); c.t = c.t.Add(d) }

func run(s *store, o observer, ts *string, args ...string) string {
	b := make([][]byte, len(args))
	for i, a := range args {
		b[i] = []byte(a)
	}
	return string(s.execute(request{payload: resp.EncodeRequest(b...), ts: ts, clientID: o.clientID(), observer: func() observer { return o }}).payload)
}

// An entry expires exactly once: whichever of lazy discovery or the reaper
// gets there first emits the single DELETE.
func TestExpiryEmitsOneDelete(t *testing.T) {
	clk := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(clk.now, quota{keys: -1, bytes: -1})
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
	if keys, bytes, _ := s.stats(); keys != 0 || bytes != 0 {
		t.Fatalf("%d keys (%d bytes) left", keys, bytes)
	}
}

// A SET with a later deadline, or without one, replaces the old deadline.
func TestSetReplacesDeadline(t *testing.T) {
	clk := &clockT{t: time.UnixMilli(1_700_000_000_000)}
	s := newStore(clk.now, quota{keys: -1, bytes: -1})
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
	s := newStore(time.Now, quota{keys: -1, bytes: -1})
	old, cur := &recorder{id: "same"}, &recorder{id: "same"}
	s.keyNotify(old, []byte("k"))
	s.keyNotify(old, []byte("only-old"))
	s.keyNotify(cur, []byte("k"))
	s.dropObserver(old)
	if _, _, regs := s.stats(); regs != 1 {
		t.Fatalf("%d registrations, want 1", regs)
	}
	if s.watchers["k"]["same"] != cur {
		t.Fatal("the newer connection lost its registration")
	}
}

func TestPasswordFileErrorsNameFileAndLine(t *testing.T) {
	dir := t.TempDir()
	h, err := bcrypt.GenerateFromPassword([]byte("pw"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	hash := string(h)
	for _, tc := range []struct{ name, content, want string }{
		{"no colon", "# users\n\nalice\n", ":3: want username:bcrypt-hash"},
		{"empty user", ":" + hash + "\n", ":1: empty username"},
		{"bad hash", "alice:plain\n", `:1: user "alice": not a bcrypt hash`},
		{"duplicate", "alice:" + hash + "\nalice:" + hash + "\n", `:2: duplicate user "alice"`},
		{"empty", "# nobody\n", "no users"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := dir + "/" + strings.ReplaceAll(tc.name, " ", "_")
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, _, err := readPasswordFile(path)
			if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s and %q", err, path, tc.want)
			}
		})
	}
	path := dir + "/ok"
	content := "# comment\r\n\r\n  alice:" + hash + "  \r\nbob:$2y$05$Jq5YWvS.vDfKT/fc/gcTBOb9WHNwtf32G183UFkOHwU.7u4u/et6e\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	creds, _, err := readPasswordFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !creds.check([]byte("alice"), []byte("pw")) || creds.check([]byte("alice"), []byte("nope")) || creds.check([]byte("carol"), []byte("pw")) {
		t.Fatal("credential checks wrong")
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

	s := newStore(func() time.Time { return now }, quota{keys: 64, bytes: -1})
	o := &recorder{id: "fuzz"}
	f.Fuzz(func(t *testing.T, payload []byte, ts, ft string) {
		req := request{payload: payload, clientID: o.id, observer: func() observer { return o }}
		if ts != "" {
			req.ts = &ts
		}
		if ft != "" {
			req.ft = &ft
		}
		r := s.execute(req)
		rep, err := resp.ParseReply(r.payload)
		if err != nil {
			t.Fatalf("reply %q is not RESP3: %v", r.payload, err)
		}
		if rep.Kind == resp.KindError && r.hasVersion {
			t.Fatalf("error reply %q with a version", r.payload)
		}
		if r.hasVersion && (r.version.Node != nodeID || r.version.IsZero()) {
			t.Fatalf("reply version %v", r.version)
		}
		if rep.Kind == resp.KindError && !knownErrText(string(rep.Str)) {
			t.Fatalf("unknown error text %q", rep.Str)
		}
		if keys, _, _ := s.stats(); keys > 64 {
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
	s := newStore(time.Now, quota{keys: -1, bytes: -1})
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
