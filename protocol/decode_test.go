package protocol

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

func props(kv ...string) paho.UserProperties {
	var u paho.UserProperties
	for i := 0; i+1 < len(kv); i += 2 {
		u = append(u, paho.UserProperty{Key: kv[i], Value: kv[i+1]})
	}
	return u
}

// §3: how the SDKs decode non-200 statuses.
func TestDecodeStatus(t *testing.T) {
	tests := []struct {
		name string
		user paho.UserProperties
		want *StatusError // nil: no error
		bad  bool         // ErrUnexpectedReply
	}{
		{"200", props("__stat", "200"), nil, false},
		{"missing", props("__ts", "1:0:x"), nil, true},
		{"not a number", props("__stat", "ok"), nil, true},
		{"out of range", props("__stat", "20"), nil, true},
		{"400 payload", props("__stat", "400", "__stMsg", "bad"), &StatusError{Code: 400, Kind: StatusPayloadInvalid, Message: "bad"}, false},
		{"400 header missing", props("__stat", "400", "__propName", "Correlation Data"), &StatusError{Code: 400, Kind: StatusHeaderMissing, PropertyName: "Correlation Data"}, false},
		{"415 header invalid", props("__stat", "415", "__propName", "Content Type", "__propVal", "text/plain"), &StatusError{Code: 415, Kind: StatusHeaderInvalid, PropertyName: "Content Type", PropertyValue: "text/plain"}, false},
		{"408 with duration", props("__stat", "408", "__propName", "timeout", "__propVal", "PT10S"), &StatusError{Code: 408, Kind: StatusTimeout, PropertyName: "timeout", PropertyValue: "PT10S", Timeout: 10 * time.Second}, false},
		{"408 bad duration kept", props("__stat", "408", "__propVal", "10s"), &StatusError{Code: 408, Kind: StatusTimeout, PropertyValue: "10s"}, false},
		{"500 application", props("__stat", "500", "__apErr", "true", "__stMsg", "boom"), &StatusError{Code: 500, Kind: StatusApplicationError, Message: "boom"}, false},
		{"500 internal logic", props("__stat", "500", "__propName", "x"), &StatusError{Code: 500, Kind: StatusInternalLogicError, PropertyName: "x"}, false},
		{"500 unknown", props("__stat", "500"), &StatusError{Code: 500, Kind: StatusUnknown}, false},
		{"503", props("__stat", "503", "__propName", "state"), &StatusError{Code: 503, Kind: StatusStateInvalid, PropertyName: "state"}, false},
		{"505", props("__stat", "505", "__requestProtVer", "3.0", "__supProtMajVer", "1"), &StatusError{Code: 505, Kind: StatusUnsupportedVersion, RequestProtocolVersion: "3.0", SupportedMajorVersions: "1"}, false},
		{"418", props("__stat", "418"), &StatusError{Code: 418, Kind: StatusUnknown}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := decodeStatus(tc.user)
			switch {
			case tc.bad:
				if !errors.Is(err, ErrUnexpectedReply) {
					t.Fatalf("error %v, want ErrUnexpectedReply", err)
				}
			case tc.want == nil:
				if err != nil {
					t.Fatal(err)
				}
			default:
				var se *StatusError
				if !errors.As(err, &se) || *se != *tc.want || !errors.Is(err, ErrStatus) {
					t.Fatalf("got %#v, want %#v", err, tc.want)
				}
				if se.Error() == "" {
					t.Error("empty message")
				}
			}
		})
	}
}

func TestParseISODuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration // -1: error
	}{
		{"PT10S", 10 * time.Second},
		{"PT1.5S", 1500 * time.Millisecond},
		{"PT0.000000001S", 1},
		{"PT0.1234567891S", 123456789},
		{"PT2M", 2 * time.Minute},
		{"PT1H2M3S", time.Hour + 2*time.Minute + 3*time.Second},
		{"P1D", 24 * time.Hour},
		{"P1W2DT1S", 9*24*time.Hour + time.Second},
		{"P0D", 0},
		{"", -1}, {"P", -1}, {"PT", -1}, {"T10S", -1}, {"PT10", -1}, {"PTS", -1},
		{"P1Y", -1}, {"P1M", -1}, {"PT1D", -1}, {"P1H", -1},
		{"PT1S2M", -1}, {"PT1M1M", -1}, {"P1DT", -1}, {"PT1.5M", -1}, {"PT1.S", -1}, {"PT.5S", -1},
		{"PT1.2.3S", -1}, {"PT-1S", -1}, {"PT99999999999999999999S", -1}, {"P40000D", -1},
		{"PT1.5S1", -1}, {"P1DTT1S", -1},
	}
	for _, tc := range tests {
		got, err := parseISODuration(tc.in)
		if tc.want < 0 {
			if err == nil {
				t.Errorf("%q = %v, want an error", tc.in, got)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

// The queue keeps order, drops notifications beyond its bound (never
// connection events) and marks the gap with one EventOverflow.
func TestEventQueueOverflow(t *testing.T) {
	q := &eventQueue{log: slog.New(slog.DiscardHandler), bound: 3, wake: make(chan struct{}, 1)}
	n := func(i int) Event { return Event{Kind: EventNotify, Key: []byte(strconv.Itoa(i))} }
	describe := func(e Event) string {
		switch e.Kind {
		case EventNotify:
			return string(e.Key)
		case EventOverflow:
			if !errors.Is(e.Err, ErrEventsDropped) {
				return "overflow without ErrEventsDropped"
			}
			return "overflow:" + e.Err.Error()[len(ErrEventsDropped.Error())+2:]
		}
		return e.Kind.String()
	}
	drain := func() []string {
		var out []string
		for {
			e, ok := q.pop()
			if !ok {
				return out
			}
			out = append(out, describe(e))
		}
	}
	for i := 1; i <= 5; i++ {
		q.push(n(i))
	}
	q.push(Event{Kind: EventConnected})
	if got, want := fmt.Sprint(drain()), "[1 2 3 overflow:2 connected]"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	for i := 6; i <= 9; i++ { // 9 dropped
		q.push(n(i))
	}
	q.pop()
	q.pop()
	q.push(n(10)) // room for the marker and 10
	q.push(n(11)) // full again
	if got, want := fmt.Sprint(drain()), "[8 overflow:1 10]"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	q.push(n(12))
	if got, want := fmt.Sprint(drain()), "[overflow:1 12]"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
	if d := q.droppedTotal(); d != 4 {
		t.Errorf("dropped %d, want 4", d)
	}
}

// End to end: a reader that does not keep up loses notifications, counted,
// and is told so by an EventOverflow in the right place.
func TestEventOverflowThroughClient(t *testing.T) {
	s := startScript(t, nil)
	c := connect(t, s.addr, func(cfg *Config) { cfg.EventBuffer = 4 })
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	const n = 20
	id := c.ClientID()
	ts := func(i int) string { return hlc.HLC{Wall: 1_732_000_000_000, Counter: uint64(i), Node: "S"}.String() }
	for i := range n {
		s.inject(notifyPacket(id, []byte("k"), string(resp.AppendNotifySet(nil, []byte(strconv.Itoa(i)))), wire.PropTimestamp, ts(i)))
	}
	testutil.WaitFor(t, "the notifications to be processed", func() bool { return c.Stats().Notifications == n })
	dropped := int(c.Stats().EventsDropped)
	if dropped == 0 || dropped > n-4 {
		t.Fatalf("%d dropped with a bound of 4", dropped)
	}
	overflowCount := func(e Event) int {
		var k int
		if !errors.Is(e.Err, ErrEventsDropped) {
			t.Fatalf("overflow event without ErrEventsDropped: %v", e.Err)
		}
		if _, err := fmt.Sscanf(e.Err.Error()[len(ErrEventsDropped.Error()):], ": %d", &k); err != nil {
			t.Fatalf("overflow event %q: %v", e.Err, err)
		}
		return k
	}
	last, got, markers := -1, 0, 0
	for got < n-dropped {
		switch e := nextEvent(t, c); e.Kind {
		case EventOverflow:
			markers += overflowCount(e)
		case EventNotify:
			v, _ := strconv.Atoi(string(e.Value))
			if v <= last {
				t.Fatalf("value %d after %d", v, last)
			}
			last = v
			got++
		default:
			t.Fatalf("event %v", e.Kind)
		}
	}
	s.inject(notifyPacket(id, []byte("k"), string(resp.AppendNotifySet(nil, []byte("after"))), wire.PropTimestamp, ts(n)))
	for {
		e := nextEvent(t, c)
		if e.Kind == EventOverflow {
			markers += overflowCount(e)
			continue
		}
		if e.Kind != EventNotify || string(e.Value) != "after" {
			t.Fatalf("event %v %q, want the notification sent after draining", e.Kind, e.Value)
		}
		break
	}
	if markers != dropped {
		t.Errorf("overflow events report %d dropped, stats %d", markers, dropped)
	}
}

// Fuzz the response decoding beyond resp: status, content type, protocol
// version and version properties together with any payload.
func FuzzDecodeResponse(f *testing.F) {
	f.Add("200", "", "", "", "001732000000000:00001:StateStore", "1.0", wire.ContentType, []byte("+OK\r\n"))
	f.Add("200", "", "", "", "", "", "", []byte("$-1\r\n"))
	f.Add("408", "late", "timeout", "PT1.5S", "", "1.0", wire.ContentType, []byte(""))
	f.Add("400", "", "Correlation Data", "", "", "", "", []byte{})
	f.Add("500", "x", "", "", "1:2:3", "1.9", "application/octet-stream;x", []byte("-ERR syntax error\r\n"))
	f.Add("505", "", "", "", "", "2.0", "", []byte(":1\r\n"))
	f.Add("2OO", "", "", "", "x", "1", "text/plain", []byte("$3\r\nabc\r\n"))
	f.Fuzz(func(t *testing.T, stat, msg, name, val, ts, protVer, ct string, payload []byte) {
		p := &paho.PublishProperties{ContentType: ct}
		for _, kv := range [][2]string{{wire.PropStatus, stat}, {wire.PropStatusMsg, msg}, {wire.PropName, name}, {wire.PropValue, val}, {wire.PropTimestamp, ts}, {wire.PropProtVer, protVer}} {
			if kv[1] != "" {
				p.User = append(p.User, paho.UserProperty{Key: kv[0], Value: kv[1]})
			}
		}
		rep, err := decodeResponse(p, payload)
		if err != nil {
			var se *StatusError
			if errors.As(err, &se) {
				if se.Code == 200 || !errors.Is(err, ErrStatus) || se.Error() == "" {
					t.Fatalf("bad status error %#v", se)
				}
				if se.Timeout < 0 || se.Timeout > maxISODuration {
					t.Fatalf("timeout %v out of range", se.Timeout)
				}
			} else if !errors.Is(err, ErrUnexpectedReply) {
				t.Fatalf("error %v is neither a status error nor ErrUnexpectedReply", err)
			}
			return
		}
		if n, _ := strconv.Atoi(stat); n != 200 {
			t.Fatalf("status %q accepted", stat)
		}
		if rep.r.Kind == resp.KindInvalid {
			t.Fatal("invalid reply kind accepted")
		}
		if rep.hasVersion {
			back, err := hlc.Parse(rep.version.String())
			if err != nil || back != rep.version {
				t.Fatalf("version %q does not round-trip: %v", rep.version, err)
			}
		}
		// Every command's interpretation must return a result or an error
		// wrapping ErrUnexpectedReply, never panic.
		if _, err := getResult(rep); err != nil && !errors.Is(err, ErrUnexpectedReply) {
			t.Fatal(err)
		}
		if _, err := setResult(rep); err != nil && !errors.Is(err, ErrUnexpectedReply) {
			t.Fatal(err)
		}
	})
}

func FuzzParseISODuration(f *testing.F) {
	for _, s := range []string{"PT10S", "PT1.5S", "P1W2DT3H4M5.000000001S", "P", "PT", "P1Y", "PT-1S", "PT1.2.3S"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseISODuration(s)
		if err != nil {
			return
		}
		if d < 0 || d > maxISODuration {
			t.Fatalf("%q = %v out of range", s, d)
		}
		// Re-encoded as whole seconds and nanoseconds it parses to the same.
		enc := fmt.Sprintf("PT%d.%09dS", d/time.Second, d%time.Second)
		if back, err := parseISODuration(enc); err != nil || back != d {
			t.Fatalf("%q = %v, but %q = %v, %v", s, d, enc, back, err)
		}
	})
}

// Fuzz notification handling: topic, properties and payload from the wire.
// Whatever arrives, handleNotify queues only well-formed SET/DELETE events.
func FuzzHandleNotify(f *testing.F) {
	const id = "me"
	good := wire.NotifyTopic(id, []byte("k"))
	f.Add(good, "001732000000000:00001:S", []byte("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$1\r\nv\r\n"))
	f.Add(good, "1:0:S", []byte("*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"))
	f.Add(good, "", []byte("*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"))
	f.Add(good[:len(good)-1]+"g", "1:0:S", []byte("*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"))
	f.Add(good, "1:0:S", []byte("*2\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n"))
	f.Fuzz(func(t *testing.T, topic, ts string, payload []byte) {
		c := &Client{
			clientID: id,
			log:      slog.New(slog.DiscardHandler),
			clock:    hlc.NewClock("client", func() time.Time { return time.UnixMilli(1_732_000_000_000) }),
			watched:  map[string]*lastNotify{"k": {}},
			ready:    &conn{}, // notifications before the connection is ready are dropped unread
			events:   &eventQueue{log: slog.New(slog.DiscardHandler), bound: 8, wake: make(chan struct{}, 1)},
		}
		p := &paho.Publish{Topic: topic, Payload: payload, Properties: &paho.PublishProperties{}}
		if ts != "" {
			p.Properties.User = props(wire.PropTimestamp, ts)
		}
		c.handleNotify(p)
		c.handleNotify(p) // a repeat is suppressed for the watched key
		for e, ok := c.events.pop(); ok; e, ok = c.events.pop() {
			if e.Kind != EventNotify || len(e.Key) == 0 || (e.Op != OpSet && e.Op != OpDelete) ||
				(e.Op == OpSet) != (e.Value != nil) || e.Version.Node == "" {
				t.Fatalf("bad event %#v", e)
			}
			if err := hlc.CheckSkew(e.Version, time.UnixMilli(1_732_000_000_000)); err != nil {
				t.Fatalf("event version %s too far ahead was queued", e.Version)
			}
		}
		st := c.stats.notifications.Load() + c.stats.notificationsDropped.Load() + c.stats.duplicatesSuppressed.Load()
		if st != 2 {
			t.Fatalf("2 notifications handled but %d counted", st)
		}
	})
}
