package broker_test

// Conformance tests for statestore-protocol.md §16, all over real MQTT
// through the embedded broker on a random loopback port.
//
// | §16 point                                              | test                                              |
// |--------------------------------------------------------|---------------------------------------------------|
// |  1 serves QoS 1 requests on the request topic          | TestP01_ServesQoS1RequestsOnRequestTopic          |
// |  2 reply QoS 1, same correlation, __stat, CT, payload  | TestP02_ResponseProperties                        |
// |  3 no reply without/forbidden response topic, logged   | TestP03_NoReplyWithoutValidResponseTopic          |
// |  4 __protVer absent/1.x ok, else 505                   | TestP04_ProtocolVersion                           |
// |  5 sent __protVer is 1.0, sent __ts parses             | TestP05_ServerTimestampsAndProtocolVersion        |
// |  6 payload failures: -ERR <exact text> under 200       | TestP06_PayloadErrorsAreERRWithStatus200          |
// |  7 redelivered request gets the first reply            | TestP07_RedeliveredRequestGetsFirstReply          |
// |  8 SET/GET byte-exact, GET __ts == SET __ts            | TestP08_SetGetValueAndVersion                     |
// |  9 GET absent/expired: $-1, no __ts                    | TestP09_GetMissHasNoTimestamp                     |
// | 10 DEL :1 / :0, then GET misses                        | TestP10_Del                                       |
// | 11 VDEL :-1 / :1 / :0                                  | TestP11_Vdel                                      |
// | 12 NX / NEX semantics                                  | TestP12_NxNex                                     |
// | 13 versions > request __ts and earlier versions        | TestP13_VersionsIncrease                          |
// | 14 PX expiry; SET without PX clears it                 | TestP14_PxExpiry                                  |
// | 15 empty key / unknown / arity / syntax errors         | TestP15_EmptyKeyUnknownArityAndSyntax             |
// | 16 __ts / __ft validation and skew                     | TestP16_TimestampAndFencingTokenValidation        |
// | 17 GET/DEL/VDEL/KEYNOTIFY ignore their __ts            | TestP17_NonSetCommandsIgnoreTimestamp             |
// | 18 fencing E2/E4/equal/newer                           | TestP18_Fencing                                   |
// | 19 GET needs no __ft; DEL/expiry unfence               | TestP19_GetNeedsNoFenceAndRemovalUnfences         |
// | 20 lease scenario: pre-lock client HLC rejected        | TestP20_LeaseFencingScenario                      |
// | 21 KEYNOTIFY replies                                   | TestP21_KeynotifyReplies                          |
// | 22 one NOTIFY per change incl. expiry, actor included  | TestP22_NotificationPerChange                     |
// | 23 upper-case hex topic, byte-exact payloads           | TestP23_NotifyTopicAndPayloadBytes                |
// | 24 no spurious NOTIFY, none after STOP, persistence    | TestP24_NoSpuriousNotifications                   |
// | 25 registrations vanish on disconnect                  | TestP25_RegistrationsDropOnDisconnect             |
// | 26 delivery without subscription; exactly once         | TestP26_NotifyWithoutSubscriptionAndExactlyOnce   |
// | 27 lease holder / acquire / release                    | TestP27_LeaseHolderAcquireRelease                 |
// | 28 second Lock after expiry, larger token              | TestP28_SecondLockAfterExpiryHasLargerToken       |
// | 29 Edit under lock; waiter times out, value intact     | TestP29_EditUnderLock                             |
// | 30 many concurrent clients, linearizable per key       | TestP30_ConcurrentClientsLinearizable             |
// | 31 quota                                               | TestP31_Quota                                     |
//
// Points 27-29 concern the Go SDK's leasedlock package, which is not
// available from the module proxy here: lease_test.go implements its §14
// recipe (SET NEX PX / VDEL / GET / KEYNOTIFY, Edit with the token as __ft)
// on the test client instead. The vectors of
// protocol/resp/testdata/vectors.json ("exchanges") are replayed over MQTT
// by TestVectorExchanges.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

func withClock(c *testutil.Clock) func(*broker.Config) {
	return func(cfg *broker.Config) { cfg.Now = c.Now }
}

func mustHLC(t testing.TB, s string) hlc.HLC {
	t.Helper()
	h, err := hlc.Parse(s)
	if err != nil {
		t.Fatalf("__ts %q: %v", s, err)
	}
	return h
}

// later fails unless HLC text b is strictly greater than a.
func later(t testing.TB, a, b string) {
	t.Helper()
	if mustHLC(t, b).Compare(mustHLC(t, a)) <= 0 {
		t.Fatalf("version %s is not greater than %s", b, a)
	}
}

func errText(text string) string { return "-ERR " + text + "\r\n" }

func bulk(v string) string { return string(resp.AppendBulk(nil, []byte(v))) }

// logCapture is a slog handler that keeps messages for assertions.
type logCapture struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l *logCapture) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Level.String()+" "+r.Message)
	return nil
}
func (l *logCapture) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logCapture) WithGroup(string) slog.Handler      { return l }
func (l *logCapture) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.msgs {
		if strings.Contains(m, sub) {
			return true
		}
	}
	return false
}

func withLogs(l *logCapture) func(*broker.Config) {
	return func(cfg *broker.Config) { cfg.Logger = slog.New(l) }
}

// subscribe adds a subscription to c.
func (c *client) subscribe(filter string, qos byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: qos}}}); err != nil {
		c.t.Fatalf("subscribe %s: %v", filter, err)
	}
}

// strays drains the publishes nobody waited for, after a round trip that
// flushes everything queued for c before it.
func (c *client) strays() []*paho.Publish {
	c.t.Helper()
	c.call("GET", "flush-"+c.id)
	var out []*paho.Publish
	for {
		select {
		case p := <-c.stray:
			out = append(out, p)
		default:
			return out
		}
	}
}

// publishNoReply publishes p (registering its correlation data), then
// proves with a later round trip on the same connection that no response
// came for it. It returns the PUBACK result.
func (c *client) publishNoReply(p *paho.Publish) (*paho.PublishResponse, error) {
	c.t.Helper()
	ch := make(chan *paho.Publish, 1)
	corr := string(p.Properties.CorrelationData)
	c.mu.Lock()
	c.pending[corr] = ch
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	pr, err := c.pc.Publish(ctx, p)
	c.call("GET", "after-"+c.id)
	select {
	case r := <-ch:
		c.t.Fatalf("got a response %q to a request that must not be answered", r.Payload)
	default:
	}
	c.mu.Lock()
	delete(c.pending, corr)
	c.mu.Unlock()
	return pr, err
}

func TestP01_ServesQoS1RequestsOnRequestTopic(t *testing.T) {
	b := brokertest.Start(t)
	spy := dial(t, b)
	spy.subscribe(wire.RequestTopic, 1)
	c := dial(t, b)
	c.set("k", "v")
	expectPayload(t, c.call("GET", "k"), bulk("v"))
	if s := spy.strays(); len(s) != 0 {
		t.Fatalf("requests were forwarded to a subscriber of the request topic: %d publishes", len(s))
	}
}

func TestP02_ResponseProperties(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	for _, args := range [][]string{{"SET", "k", "v"}, {"GET", "k"}, {"GET", "absent"}, {"GET", ""}} {
		p := c.request(resp.EncodeRequest(toBytes(args)...))
		r := c.mustExchange(p)
		rp := r.pub
		props := rp.Properties
		switch {
		case rp.Topic != c.respTopic:
			t.Errorf("%v: topic %q", args, rp.Topic)
		case rp.QoS != 1:
			t.Errorf("%v: QoS %d, want 1", args, rp.QoS)
		case rp.Retain:
			t.Errorf("%v: retained", args)
		case !bytes.Equal(props.CorrelationData, p.Properties.CorrelationData):
			t.Errorf("%v: correlation data %x, want %x", args, props.CorrelationData, p.Properties.CorrelationData)
		case props.ContentType != wire.ContentType:
			t.Errorf("%v: content type %q", args, props.ContentType)
		case props.PayloadFormat == nil || *props.PayloadFormat != 0:
			t.Errorf("%v: payload format indicator %v, want 0", args, props.PayloadFormat)
		case props.MessageExpiry == nil || *props.MessageExpiry < 1 || *props.MessageExpiry > 10:
			t.Errorf("%v: message expiry %v, want copied from the request (10)", args, props.MessageExpiry)
		case props.User.Get(wire.PropStatus) != "200":
			t.Errorf("%v: __stat %q", args, props.User.Get(wire.PropStatus))
		case props.User.Get(wire.PropProtVer) != "1.0":
			t.Errorf("%v: __protVer %q", args, props.User.Get(wire.PropProtVer))
		case len(rp.Payload) == 0:
			t.Errorf("%v: empty payload", args)
		}
		if _, err := resp.ParseReply(rp.Payload); err != nil {
			t.Errorf("%v: payload %q is not a RESP3 reply: %v", args, rp.Payload, err)
		}
	}
}

func TestP03_NoReplyWithoutValidResponseTopic(t *testing.T) {
	logs := &logCapture{}
	b := brokertest.Start(t, withLogs(logs))
	spy := dial(t, b) // sees any reply on the request, notify or invalid topics
	for _, f := range []string{wire.RequestTopic, "clients/statestore/#", "a//b"} {
		spy.subscribe(f, 1)
	}

	t.Run("missing response topic", func(t *testing.T) {
		c := dial(t, b)
		p := c.request(resp.EncodeRequest([]byte("SET"), []byte("nort"), []byte("v")))
		p.Properties.ResponseTopic = ""
		pr, err := c.publishNoReply(p)
		if err == nil || pr == nil || pr.ReasonCode != 0x83 {
			t.Fatalf("PUBACK %+v, %v: want reason code 0x83", pr, err)
		}
		if !logs.has("missing or invalid response topic") {
			t.Fatal("dropped request not logged")
		}
		expectPayload(t, c.call("GET", "nort"), "$-1\r\n")
	})
	for _, rt := range []string{"replies/+", "replies/#", "a//b", "$SYS/x"} {
		t.Run("invalid response topic "+rt, func(t *testing.T) {
			c := dial(t, b)
			p := c.request(resp.EncodeRequest([]byte("GET"), []byte("k")))
			p.Properties.ResponseTopic = rt
			if pr, _ := c.publishNoReply(p); pr == nil || pr.ReasonCode != 0x83 {
				t.Fatalf("PUBACK %+v: want reason code 0x83", pr)
			}
		})
	}
	t.Run("QoS 0", func(t *testing.T) {
		c := dial(t, b)
		p := c.request(resp.EncodeRequest([]byte("SET"), []byte("qos0"), []byte("v")))
		p.QoS = 0
		if _, err := c.publishNoReply(p); err != nil {
			t.Fatal(err)
		}
		expectPayload(t, c.call("GET", "qos0"), "$-1\r\n")
	})
	forbidden := []string{
		wire.RequestTopic,
		"clients/statestore/v1/" + wire.ServiceGUID,
		wire.NotifyTopic("x", []byte("k")),
	}
	for _, rt := range forbidden {
		t.Run("forbidden "+rt, func(t *testing.T) {
			c := dial(t, b)
			p := c.request(resp.EncodeRequest([]byte("SET"), []byte("forbidden"), []byte("v")))
			p.Properties.ResponseTopic = rt
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _, _ = c.pc.Publish(ctx, p) }()
			select {
			case d := <-c.serverDis:
				if d.ReasonCode != 0x87 {
					t.Fatalf("DISCONNECT reason 0x%x, want 0x87", d.ReasonCode)
				}
			case <-time.After(wait):
				t.Fatal("client using a forbidden response topic was not disconnected")
			}
			if !logs.has("forbidden response topic") {
				t.Fatal("forbidden response topic not logged")
			}
			other := dial(t, b)
			expectPayload(t, other.call("GET", "forbidden"), "$-1\r\n")
		})
	}
	// The spy saw no reply on the request or notify topic space.
	for _, p := range spy.strays() {
		t.Errorf("unexpected publish on %q: %q", p.Topic, p.Payload)
	}
}

func TestMissingCorrelationDataGets400(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	p := c.request(resp.EncodeRequest([]byte("GET"), []byte("k")))
	p.Properties.CorrelationData = nil
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := c.pc.Publish(ctx, p); err != nil {
		t.Fatal(err)
	}
	select {
	case rp := <-c.stray:
		u := rp.Properties.User
		if rp.Topic != c.respTopic || u.Get(wire.PropStatus) != "400" || u.Get(wire.PropName) != "Correlation Data" || u.Get(wire.PropStatusMsg) == "" {
			t.Fatalf("response on %q with %v, want __stat 400 and __propName Correlation Data", rp.Topic, u)
		}
	case <-time.After(wait):
		t.Fatal("no 400 response")
	}
}

func TestP04_ProtocolVersion(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	for _, tc := range []struct {
		ver    *string
		status string
	}{
		{nil, "200"}, {ptr("1.0"), "200"}, {ptr("1.7"), "200"}, {ptr("01.0"), "200"},
		{ptr("2.0"), "505"}, {ptr("0.9"), "505"}, {ptr("1"), "505"}, {ptr("1.0.0"), "505"},
		{ptr("abc"), "505"}, {ptr(""), "505"}, {ptr("1.x"), "505"},
	} {
		name := "absent"
		if tc.ver != nil {
			name = *tc.ver
		}
		t.Run(name, func(t *testing.T) {
			p := c.request(resp.EncodeRequest([]byte("GET"), []byte("k")))
			setUser(p, wire.PropProtVer, tc.ver)
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			r, _, err := c.exchange(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			u := r.pub.Properties.User
			if r.status != tc.status {
				t.Fatalf("__stat %q, want %s", r.status, tc.status)
			}
			if tc.status == "505" {
				if u.Get(wire.PropSupportedVer) != "1" || u.Get(wire.PropRequestVer) != *tc.ver || u.Get(wire.PropStatusMsg) == "" {
					t.Fatalf("505 properties %v", u)
				}
			} else {
				expectPayload(t, r, "$-1\r\n")
			}
			if u.Get(wire.PropProtVer) != "1.0" {
				t.Fatalf("__protVer %q", u.Get(wire.PropProtVer))
			}
		})
	}
}

func ptr(s string) *string { return &s }

func toBytes(args []string) [][]byte {
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// setUser replaces (or with v == nil removes) user property key of p.
func setUser(p *paho.Publish, key string, v *string) {
	var u paho.UserProperties
	for _, x := range p.Properties.User {
		if x.Key != key {
			u = append(u, x)
		}
	}
	if v != nil {
		u.Add(key, *v)
	}
	p.Properties.User = u
}

// doTS sends args with __ts and __ft set to the given values (nil: absent).
func (c *client) doTS(ts, ft *string, args ...string) result {
	c.t.Helper()
	p := c.request(resp.EncodeRequest(toBytes(args)...))
	setUser(p, wire.PropTimestamp, ts)
	setUser(p, wire.PropFencingToken, ft)
	return c.mustExchange(p)
}

func TestP05_ServerTimestampsAndProtocolVersion(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	c.keyNotify("k")
	var all []result
	for _, args := range [][]string{{"SET", "k", "v"}, {"SET", "k", "v", "NX"}, {"GET", "k"}, {"VDEL", "k", "x"}, {"DEL", "k"}, {"DEL", "k"}} {
		all = append(all, c.call(args...))
	}
	n1, n2 := c.nextNote(), c.nextNote()
	check := func(what, ts, protVer string) {
		h := mustHLC(t, ts)
		if h.Node != "StateStore" || h.IsZero() {
			t.Errorf("%s: __ts %q: want a StateStore version", what, ts)
		}
		if ts != h.String() {
			t.Errorf("%s: __ts %q is not in the padded form %q", what, ts, h.String())
		}
		if protVer != "1.0" {
			t.Errorf("%s: __protVer %q", what, protVer)
		}
	}
	for i, r := range all {
		if r.hasTS {
			check(fmt.Sprintf("reply %d", i), r.ts, r.pub.Properties.User.Get(wire.PropProtVer))
		}
	}
	for _, n := range []note{n1, n2} {
		check("notify "+n.op, n.ts, n.pub.Properties.User.Get(wire.PropProtVer))
	}
}

func TestP06_PayloadErrorsAreERRWithStatus200(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock), func(cfg *broker.Config) { cfg.Quota = 2 })
	c := dial(t, b)
	fence := hlcAt(clock, 0, 1, "lock")
	c.doTS(ptr(hlcAt(clock, 0, 0, "c")), &fence, "SET", "fenced", "v")
	c.call("SET", "other", "v") // quota 2 reached
	for _, tc := range []struct {
		name   string
		ts, ft *string
		args   []string
		text   string
	}{
		{"E1 timestamp skew", ptr(hlcAt(clock, 61*time.Second, 0, "c")), nil, []string{"SET", "k", "v"}, wire.ErrTextTimestampSkew},
		{"E2 missing fencing token", ptr(hlcAt(clock, 0, 0, "c")), nil, []string{"SET", "fenced", "v"}, wire.ErrTextMissingFencingToken},
		{"E3 fencing token skew", ptr(hlcAt(clock, 0, 0, "c")), ptr(hlcAt(clock, 61*time.Second, 0, "f")), []string{"SET", "k", "v"}, wire.ErrTextFencingTokenSkew},
		{"E4 lower fencing token", ptr(hlcAt(clock, 0, 0, "c")), ptr(hlcAt(clock, 0, 0, "lock")), []string{"DEL", "fenced"}, wire.ErrTextFencingTokenLower},
		{"E5 quota", ptr(hlcAt(clock, 0, 0, "c")), nil, []string{"SET", "third", "v"}, wire.ErrTextQuotaExceeded},
		{"E6 syntax", ptr(hlcAt(clock, 0, 0, "c")), nil, []string{"SET", "k", "v", "XX"}, wire.ErrTextSyntax},
		{"E8 unknown command", nil, nil, []string{"PING", "k"}, wire.ErrTextUnknownCommand},
		{"E9 arity", nil, nil, []string{"GET"}, wire.ErrTextWrongNumberOfArgs},
		{"E10 missing timestamp", nil, nil, []string{"SET", "k", "v"}, wire.ErrTextTimestampMissing},
		{"E11 malformed timestamp", ptr("abc"), nil, []string{"SET", "k", "v"}, wire.ErrTextTimestampMalformed},
		{"E11 malformed fencing token", ptr(hlcAt(clock, 0, 0, "c")), ptr("1:2"), []string{"VDEL", "k", "v"}, wire.ErrTextTimestampMalformed},
		{"E12 empty key", nil, nil, []string{"DEL", ""}, wire.ErrTextKeyLengthZero},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := c.doTS(tc.ts, tc.ft, tc.args...) // fails unless __stat is 200
			expectPayload(t, r, errText(tc.text))
			if r.hasTS {
				t.Fatalf("error reply carries __ts %q", r.ts)
			}
			if r.reply.Kind != resp.KindError || string(r.reply.Str) != tc.text {
				t.Fatalf("parsed %v %q", r.reply.Kind, r.reply.Str)
			}
		})
	}
}

func TestP07_RedeliveredRequestGetsFirstReply(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	p := c.request(resp.EncodeRequest([]byte("SET"), []byte("k"), []byte("v"), []byte("NX")))
	first := c.mustExchange(p)
	expectPayload(t, first, "+OK\r\n")
	again := c.mustExchange(p) // same correlation data and response topic
	expectPayload(t, again, "+OK\r\n")
	if again.ts != first.ts {
		t.Fatalf("replayed __ts %q, want the first %q", again.ts, first.ts)
	}
	fresh := c.call("SET", "k", "v", "NX") // a new request is executed
	expectPayload(t, fresh, ":-1\r\n")
	if fresh.ts != first.ts {
		t.Fatalf(":-1 __ts %q, want the stored %q", fresh.ts, first.ts)
	}

	// A QoS 1 DUP resend with the same packet id, byte for byte.
	raw := dialRaw(t, b, "raw-dup")
	rt := "raw/response"
	raw.subscribe(rt)
	corr := newCorr()
	var replies [][]byte
	ts := hlc.HLC{Wall: time.Now().UnixMilli(), Node: "raw"}.String()
	for _, dup := range []bool{false, true} {
		raw.write(rawRequest(7, rt, corr, ts, dup, "SET", "dupkey", "v", "NX"))
		for got := 0; got < 2; {
			switch p := raw.read().Content.(type) {
			case *packets.Puback:
				got++
			case *packets.Publish:
				got++
				if !bytes.Equal(p.Properties.CorrelationData, corr) {
					t.Fatalf("response correlation %x", p.Properties.CorrelationData)
				}
				replies = append(replies, append(p.Payload, " "+userValue(p, wire.PropTimestamp)...))
				raw.ack(p.PacketID)
			}
		}
	}
	if len(replies) != 2 || !bytes.Equal(replies[0], replies[1]) || !bytes.HasPrefix(replies[0], []byte("+OK\r\n")) {
		t.Fatalf("replies to a request and its DUP resend: %q", replies)
	}
}

func TestP08_SetGetValueAndVersion(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	for _, tc := range []struct{ name, key, value string }{
		{"plain", "k", "value"},
		{"CRLF inside", "k-crlf", "a\r\nb\r\n"},
		{"empty value", "k-empty", ""},
		{"all byte values", "k-bin\x00\xff", string(all)},
		{"65 KB value", "k-big", strings.Repeat("v", 65_000)},
		{"6.5 KB key", strings.Repeat("K", 6_500), "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set := c.call("SET", tc.key, tc.value)
			expectPayload(t, set, "+OK\r\n")
			if !set.hasTS {
				t.Fatal("SET +OK without __ts")
			}
			get := c.call("GET", tc.key)
			expectPayload(t, get, bulk(tc.value))
			if get.ts != set.ts {
				t.Fatalf("GET __ts %q, want the SET's %q", get.ts, set.ts)
			}
		})
	}
}

func TestP09_GetMissHasNoTimestamp(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock))
	c := dial(t, b)
	r := c.call("GET", "absent")
	expectPayload(t, r, "$-1\r\n")
	if r.hasTS {
		t.Fatalf("GET miss carries __ts %q", r.ts)
	}
	c.doTS(ptr(hlcAt(clock, 0, 0, "c")), nil, "SET", "k", "v", "PX", "100")
	clock.Advance(100 * time.Millisecond)
	r = c.call("GET", "k")
	expectPayload(t, r, "$-1\r\n")
	if r.hasTS {
		t.Fatalf("GET of an expired key carries __ts %q", r.ts)
	}
}

func TestP10_Del(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	set := c.call("SET", "k", "v")
	del := c.call("DEL", "k")
	expectPayload(t, del, ":1\r\n")
	if del.ts != set.ts {
		t.Fatalf("DEL __ts %q, want the removed version %q", del.ts, set.ts)
	}
	expectPayload(t, c.call("GET", "k"), "$-1\r\n")
	miss := c.call("DEL", "k")
	expectPayload(t, miss, ":0\r\n")
	if miss.hasTS {
		t.Fatal("DEL :0 carries __ts")
	}
}

func TestP11_Vdel(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	set := c.call("SET", "k", "v")
	wrong := c.call("VDEL", "k", "other")
	expectPayload(t, wrong, ":-1\r\n")
	if wrong.ts != set.ts {
		t.Fatalf("VDEL :-1 __ts %q, want the stored %q", wrong.ts, set.ts)
	}
	expectPayload(t, c.call("GET", "k"), bulk("v"))
	right := c.call("VDEL", "k", "v")
	expectPayload(t, right, ":1\r\n")
	if right.ts != set.ts {
		t.Fatalf("VDEL :1 __ts %q, want %q", right.ts, set.ts)
	}
	expectPayload(t, c.call("GET", "k"), "$-1\r\n")
	expectPayload(t, c.call("VDEL", "k", "v"), ":0\r\n")
}

func TestP12_NxNex(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	nx := c.call("SET", "k", "v1", "NX")
	expectPayload(t, nx, "+OK\r\n")
	nx2 := c.call("SET", "k", "v2", "NX")
	expectPayload(t, nx2, ":-1\r\n")
	if nx2.ts != nx.ts {
		t.Fatalf("NX :-1 __ts %q, want the stored %q", nx2.ts, nx.ts)
	}
	nex := c.call("SET", "k", "v2", "NEX")
	expectPayload(t, nex, ":-1\r\n")
	if nex.ts != nx.ts {
		t.Fatalf("NEX :-1 __ts %q, want %q", nex.ts, nx.ts)
	}
	expectPayload(t, c.call("GET", "k"), bulk("v1"))
	renew := c.call("SET", "k", "v1", "NEX")
	expectPayload(t, renew, "+OK\r\n")
	later(t, nx.ts, renew.ts)
	expectPayload(t, c.call("SET", "fresh", "x", "NEX"), "+OK\r\n")
}

func TestP13_VersionsIncrease(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock))
	c := dial(t, b)
	// S's worked example: client clock equal to the server's.
	r := c.doTS(ptr(hlcAt(clock, 0, 0, "CLIENT")), nil, "SET", "k", "v")
	if want := hlcAt(clock, 0, 1, "StateStore"); r.ts != want {
		t.Fatalf("version %q, want %q", r.ts, want)
	}
	prev := r.ts
	for i, ts := range []string{
		hlcAt(clock, 0, 0, "CLIENT"),            // same request __ts again
		hlcAt(clock, 30*time.Second, 7, "zzzz"), // ahead, within the skew
		hlcAt(clock, 30*time.Second, 7, "aaaa"), // equal wall and counter
		"000000000000001:00000:old",             // far in the past
		hlcAt(clock, -time.Hour, 99, "past"),
	} {
		r := c.doTS(&ts, nil, "SET", fmt.Sprintf("k%d", i), "v")
		expectPayload(t, r, "+OK\r\n")
		later(t, ts, r.ts)
		later(t, prev, r.ts)
		prev = r.ts
	}
	clock.Advance(time.Minute)
	r = c.doTS(ptr(hlcAt(clock, 0, 0, "c")), nil, "SET", "k", "v")
	later(t, prev, r.ts)
}

func TestP14_PxExpiry(t *testing.T) {
	t.Run("deadline with a fake clock", func(t *testing.T) {
		clock := newFakeClock()
		b := brokertest.Start(t, withClock(clock))
		c := dial(t, b)
		ts := func() *string { return ptr(hlcAt(clock, 0, 0, "c")) }
		expectPayload(t, c.doTS(ts(), nil, "SET", "k", "v", "PX", "1000"), "+OK\r\n")
		clock.Advance(999 * time.Millisecond)
		expectPayload(t, c.call("GET", "k"), bulk("v"))
		clock.Advance(time.Millisecond)
		expectPayload(t, c.call("GET", "k"), "$-1\r\n")

		expectPayload(t, c.doTS(ts(), nil, "SET", "k2", "v", "PX", "1000"), "+OK\r\n")
		expectPayload(t, c.doTS(ts(), nil, "SET", "k2", "w"), "+OK\r\n") // clears the expiry
		clock.Advance(2 * time.Second)
		expectPayload(t, c.call("GET", "k2"), bulk("w"))

		expectPayload(t, c.doTS(ts(), nil, "SET", "k3", "v", "PX", "1.9"), "+OK\r\n") // .NET fraction, truncated
		clock.Advance(time.Millisecond)
		expectPayload(t, c.call("GET", "k3"), "$-1\r\n")
	})
	t.Run("active expiry with the real clock", func(t *testing.T) {
		b := brokertest.Start(t)
		c := dial(t, b)
		c.keyNotify("k")
		set := c.call("SET", "k", "v", "PX", "50")
		if n := c.nextNote(); n.op != resp.OpSet {
			t.Fatalf("first notification %s", n.op)
		}
		n := c.nextNote() // the reaper removed the key without any access
		if string(n.key) != "k" || n.op != resp.OpDelete {
			t.Fatalf("notification %s %q, want DELETE k", n.op, n.key)
		}
		later(t, set.ts, n.ts)
		expectPayload(t, c.call("GET", "k"), "$-1\r\n")
		if b.Keys() != 0 {
			t.Fatalf("%d keys left", b.Keys())
		}
	})
}

func TestP15_EmptyKeyUnknownArityAndSyntax(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	c.call("SET", "k", "v")
	type tc struct {
		args []string
		want string
	}
	cases := []tc{
		{[]string{"SET", "", "v"}, wire.ErrTextKeyLengthZero},
		{[]string{"GET", ""}, wire.ErrTextKeyLengthZero},
		{[]string{"DEL", ""}, wire.ErrTextKeyLengthZero},
		{[]string{"VDEL", "", "v"}, wire.ErrTextKeyLengthZero},
		{[]string{"KEYNOTIFY", ""}, wire.ErrTextKeyLengthZero},
		{[]string{"KEYNOTIFY", "", "STOP"}, wire.ErrTextKeyLengthZero},
		{[]string{"PING", "k"}, wire.ErrTextUnknownCommand},
		{[]string{"", "k"}, wire.ErrTextUnknownCommand},
		{[]string{"GETX", "k"}, wire.ErrTextUnknownCommand},
		{[]string{"GET"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"GET", "k", "x"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"SET", "k"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"SET", "k", "v", "NX", "PX", "1", "X"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"DEL"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"DEL", "k", "v"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"VDEL", "k"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"KEYNOTIFY"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"KEYNOTIFY", "k", "STOP", "x"}, wire.ErrTextWrongNumberOfArgs},
		{[]string{"SET", "k", "v", "XX"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "NX", "NEX"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "NX", "NX"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX", "0"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX", "-1"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX", "abc"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX", "1."}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX", "99999999999999999999"}, wire.ErrTextSyntax},
		{[]string{"SET", "k", "v", "PX", "10", "PX"}, wire.ErrTextSyntax},
		{[]string{"KEYNOTIFY", "k", "FOO"}, wire.ErrTextSyntax},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			expectPayload(t, c.call(tc.args...), errText(tc.want))
		})
	}
	v := loadVectors(t)
	for _, br := range v.BadRequests {
		t.Run("framing "+br.Name, func(t *testing.T) {
			expectPayload(t, c.mustExchange(c.request([]byte(br.Wire))), errText(wire.ErrTextSyntax))
		})
	}
	// Lower-case verbs and options are accepted (§5).
	expectPayload(t, c.call("set", "lc", "v", "nx", "px", "60000"), "+OK\r\n")
	expectPayload(t, c.call("Get", "lc"), bulk("v"))
	expectPayload(t, c.call("keynotify", "lc", "stop"), ":0\r\n")
	expectPayload(t, c.call("KEYNOTIFY", "lc", "get"), "+OK\r\n")
	expectPayload(t, c.call("vdel", "lc", "v"), ":1\r\n")
	expectPayload(t, c.call("GET", "k"), bulk("v")) // untouched by all of the above
}

type vectorFile struct {
	BadRequests []struct{ Name, Wire string } `json:"bad_requests"`
	Exchanges   []struct {
		Name, Request, Reply string
		WithTS               bool   `json:"with_ts"`
		TS                   string `json:"ts"`
		FT                   string `json:"ft"`
	}
}

func loadVectors(t testing.TB) vectorFile {
	t.Helper()
	data, err := os.ReadFile("../protocol/resp/testdata/vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectorFile
	if err := json.Unmarshal(data, &v); err != nil {
		t.Fatal(err)
	}
	if len(v.Exchanges) == 0 || len(v.BadRequests) == 0 {
		t.Fatal("vectors.json: no exchanges or bad requests")
	}
	return v
}

func TestVectorExchanges(t *testing.T) {
	for _, ex := range loadVectors(t).Exchanges {
		t.Run(ex.Name, func(t *testing.T) {
			b := brokertest.Start(t) // "on a fresh store"
			c := dial(t, b)
			p := c.request([]byte(ex.Request))
			switch {
			case ex.TS != "":
				setUser(p, wire.PropTimestamp, &ex.TS)
			case !ex.WithTS:
				setUser(p, wire.PropTimestamp, nil)
			}
			if ex.FT != "" {
				setUser(p, wire.PropFencingToken, &ex.FT)
			}
			r := c.mustExchange(p)
			expectPayload(t, r, ex.Reply)
			if ex.Reply == "+OK\r\n" && strings.Contains(ex.Request, "SET") && !r.hasTS {
				t.Fatal("SET +OK without __ts")
			}
		})
	}
}

func TestP16_TimestampAndFencingTokenValidation(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock))
	c := dial(t, b)
	now := hlcAt(clock, 0, 0, "c")
	for _, tc := range []struct {
		name   string
		ts, ft *string
		key    string
		want   string
	}{
		{"missing __ts", nil, nil, "a", errText(wire.ErrTextTimestampMissing)},
		{"unparsable __ts", ptr("abc"), nil, "a", errText(wire.ErrTextTimestampMalformed)},
		{"__ts with empty node", ptr("1:2:"), nil, "a", errText(wire.ErrTextTimestampMalformed)},
		{"__ts with sign", ptr("-1:0:n"), nil, "a", errText(wire.ErrTextTimestampMalformed)},
		{"__ts 60.001 s ahead", ptr(hlcAt(clock, 60001*time.Millisecond, 0, "c")), nil, "a", errText(wire.ErrTextTimestampSkew)},
		{"__ts exactly 60 s ahead", ptr(hlcAt(clock, 60*time.Second, 0, "c")), nil, "b", "+OK\r\n"},
		{"__ts in the past", ptr("1:0:c"), nil, "c", "+OK\r\n"},
		{"unparsable __ft", &now, ptr("x"), "d", errText(wire.ErrTextTimestampMalformed)},
		{"__ft 60.001 s ahead on a new key", &now, ptr(hlcAt(clock, 60001*time.Millisecond, 0, "f")), "e", errText(wire.ErrTextFencingTokenSkew)},
		{"__ft from the vectors", &now, ptr("9999999999999:0:x"), "e", errText(wire.ErrTextFencingTokenSkew)},
		{"__ft exactly 60 s ahead", &now, ptr(hlcAt(clock, 60*time.Second, 0, "f")), "f", "+OK\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expectPayload(t, c.doTS(tc.ts, tc.ft, "SET", tc.key, "v"), tc.want)
		})
	}
	// __ft skew is also checked on DEL/VDEL of an absent key.
	expectPayload(t, c.doTS(&now, ptr(hlcAt(clock, 2*time.Minute, 0, "f")), "DEL", "absent"), errText(wire.ErrTextFencingTokenSkew))
	expectPayload(t, c.doTS(&now, ptr("bad"), "VDEL", "absent", "v"), errText(wire.ErrTextTimestampMalformed))
	expectPayload(t, c.call("GET", "a"), "$-1\r\n")
}

func TestP17_NonSetCommandsIgnoreTimestamp(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock))
	c := dial(t, b)
	c.doTS(ptr(hlcAt(clock, 0, 0, "c")), nil, "SET", "k", "v")
	for _, ts := range []*string{nil, ptr("garbage"), ptr(hlcAt(clock, 10*time.Minute, 0, "c")), ptr("")} {
		name := "absent"
		if ts != nil {
			name = *ts
		}
		t.Run(name, func(t *testing.T) {
			expectPayload(t, c.doTS(ts, ptr("ignored on GET"), "GET", "k"), bulk("v"))
			expectPayload(t, c.doTS(ts, nil, "KEYNOTIFY", "k"), "+OK\r\n")
			expectPayload(t, c.doTS(ts, nil, "KEYNOTIFY", "k", "STOP"), "+OK\r\n")
			expectPayload(t, c.doTS(ts, nil, "VDEL", "k", "other"), ":-1\r\n")
			expectPayload(t, c.doTS(ts, nil, "DEL", "absent"), ":0\r\n")
		})
	}
	expectPayload(t, c.doTS(ptr("garbage"), nil, "VDEL", "k", "v"), ":1\r\n")
	c.doTS(ptr(hlcAt(clock, 0, 0, "c")), nil, "SET", "k", "v")
	expectPayload(t, c.doTS(nil, nil, "DEL", "k"), ":1\r\n")
}

func TestP18_Fencing(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	lock := dial(t, b)
	t1 := lock.call("SET", "lock", "a").ts
	t2 := lock.call("SET", "lock", "b").ts
	t3 := lock.call("SET", "lock", "c").ts

	expectPayload(t, c.do(t2, "SET", "res", "v1"), "+OK\r\n") // new key: fenced with t2
	for _, args := range [][]string{{"SET", "res", "x"}, {"DEL", "res"}, {"VDEL", "res", "v1"}} {
		expectPayload(t, c.call(args...), errText(wire.ErrTextMissingFencingToken))
		expectPayload(t, c.do(t1, args...), errText(wire.ErrTextFencingTokenLower))
	}
	expectPayload(t, c.call("GET", "res"), bulk("v1"))
	expectPayload(t, c.do(t2, "SET", "res", "v2"), "+OK\r\n") // equal token
	expectPayload(t, c.do(t3, "SET", "res", "v3"), "+OK\r\n") // newer token is stored
	expectPayload(t, c.do(t2, "SET", "res", "x"), errText(wire.ErrTextFencingTokenLower))
	expectPayload(t, c.do(t3, "SET", "res", "x", "NX"), ":-1\r\n") // fencing passes, NX does not
	expectPayload(t, c.do(t2, "VDEL", "res", "v3"), errText(wire.ErrTextFencingTokenLower))
	expectPayload(t, c.do(t3, "VDEL", "res", "other"), ":-1\r\n")
	expectPayload(t, c.do(t3, "DEL", "res"), ":1\r\n")

	// An unfenced key accepts a token and becomes fenced.
	c.call("SET", "plain", "v")
	expectPayload(t, c.do(t1, "SET", "plain", "w"), "+OK\r\n")
	expectPayload(t, c.call("SET", "plain", "x"), errText(wire.ErrTextMissingFencingToken))
	// A :-1 SET stores no token.
	c.call("SET", "nx", "v")
	expectPayload(t, c.do(t1, "SET", "nx", "w", "NX"), ":-1\r\n")
	c.set("nx", "w")
}

func TestP19_GetNeedsNoFenceAndRemovalUnfences(t *testing.T) {
	clock := newFakeClock()
	b := brokertest.Start(t, withClock(clock))
	c := dial(t, b)
	ts := func() *string { return ptr(hlcAt(clock, 0, 0, "c")) }
	tok := hlcAt(clock, 0, 5, "lock")
	expectPayload(t, c.doTS(ts(), &tok, "SET", "k", "v"), "+OK\r\n")
	expectPayload(t, c.call("GET", "k"), bulk("v"))
	expectPayload(t, c.doTS(ts(), &tok, "DEL", "k"), ":1\r\n")
	expectPayload(t, c.doTS(ts(), nil, "SET", "k", "v2"), "+OK\r\n") // unfenced after DEL

	expectPayload(t, c.doTS(ts(), &tok, "SET", "e", "v", "PX", "10"), "+OK\r\n")
	expectPayload(t, c.doTS(ts(), nil, "SET", "e", "x"), errText(wire.ErrTextMissingFencingToken))
	clock.Advance(10 * time.Millisecond)
	expectPayload(t, c.doTS(ts(), nil, "SET", "e", "v2"), "+OK\r\n") // unfenced after expiry
}

func TestP20_LeaseFencingScenario(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	before := c.clock.Tick() // the client's HLC before acquiring
	lock := c.call("SET", "lock", c.id, "NEX", "PX", "10000")
	expectPayload(t, lock, "+OK\r\n")
	later(t, before.String(), lock.ts)
	expectPayload(t, c.do(lock.ts, "SET", "protected", "v"), "+OK\r\n")
	expectPayload(t, c.do(before.String(), "SET", "protected", "x"), errText(wire.ErrTextFencingTokenLower))
	expectPayload(t, c.do(before.String(), "DEL", "protected"), errText(wire.ErrTextFencingTokenLower))
	expectPayload(t, c.do(lock.ts, "SET", "protected", "v2"), "+OK\r\n")
	expectPayload(t, c.do(lock.ts, "DEL", "protected"), ":1\r\n")
}

func TestP21_KeynotifyReplies(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	c.call("SET", "present", "v")
	for _, key := range []string{"absent", "present"} {
		stop := c.call("KEYNOTIFY", key, "STOP")
		expectPayload(t, stop, ":0\r\n")
		c.keyNotify(key)
		c.keyNotify(key)
		expectPayload(t, c.call("KEYNOTIFY", key, "STOP"), "+OK\r\n") // one STOP removes it
		expectPayload(t, c.call("KEYNOTIFY", key, "STOP"), ":0\r\n")
	}
	if s := b.Stats(); s.Registrations != 0 {
		t.Fatalf("%d registrations left", s.Registrations)
	}
}

func TestP22_NotificationPerChange(t *testing.T) {
	b := brokertest.Start(t)
	watcher := dial(t, b)
	actor := dial(t, b)
	for _, c := range []*client{watcher, actor} {
		c.keyNotify("k")
	}
	set := actor.call("SET", "k", "v1")
	renew := actor.call("SET", "k", "v1", "NEX")
	del := actor.call("DEL", "k")
	set2 := actor.call("SET", "k", "v2")
	vdel := actor.call("VDEL", "k", "v2")
	exp := actor.call("SET", "k", "v3", "PX", "20")
	testutil.WaitFor(t, "the key to expire", func() bool { return b.Keys() == 0 })
	for _, c := range []*client{watcher, actor} {
		got := c.expectNotes("k SET v1", "k SET v1", "k DELETE", "k SET v2", "k DELETE", "k SET v3", "k DELETE")
		if got[0].ts != set.ts || got[1].ts != renew.ts || got[3].ts != set2.ts || got[5].ts != exp.ts {
			t.Fatalf("SET notification versions %q %q %q %q, want the SET replies' %q %q %q %q",
				got[0].ts, got[1].ts, got[3].ts, got[5].ts, set.ts, renew.ts, set2.ts, exp.ts)
		}
		later(t, del.ts, got[2].ts)
		later(t, vdel.ts, got[4].ts)
		later(t, exp.ts, got[6].ts)
	}
	expectPayload(t, actor.call("GET", "k"), "$-1\r\n")
}

func TestP23_NotifyTopicAndPayloadBytes(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b, withID("myclient"))
	key := "lock1"
	bin := "k\x00\xfe\r\n"
	for _, k := range []string{key, bin} {
		c.keyNotify(k)
	}
	c.call("SET", key, "myclient")
	c.call("DEL", key)
	c.call("SET", bin, "")
	want := []struct{ topic, payload string }{
		{"clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6D79636C69656E74/command/notify/6C6F636B31",
			"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$8\r\nmyclient\r\n"},
		{"clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6D79636C69656E74/command/notify/6C6F636B31",
			"*2\r\n$6\r\nNOTIFY\r\n$6\r\nDELETE\r\n"},
		{"clients/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/6D79636C69656E74/command/notify/6B00FE0D0A",
			"*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$0\r\n\r\n"},
	}
	for _, w := range want {
		n := c.nextNote()
		p := n.pub
		if p.Topic != w.topic || string(p.Payload) != w.payload {
			t.Fatalf("notification %q %q, want %q %q", p.Topic, p.Payload, w.topic, w.payload)
		}
		if p.QoS != 1 || p.Retain || p.Properties.ContentType != wire.ContentType ||
			p.Properties.PayloadFormat == nil || *p.Properties.PayloadFormat != 0 ||
			p.Properties.CorrelationData != nil || p.Properties.ResponseTopic != "" || n.ts == "" {
			t.Fatalf("notification properties: QoS %d retain %v %+v", p.QoS, p.Retain, p.Properties)
		}
	}
}

func TestP24_NoSpuriousNotifications(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	other := dial(t, b)
	c.keyNotify("k")
	c.keyNotify("k") // a repeat does not duplicate
	other.call("SET", "k", "v")
	c.expectNotes("k SET v")

	// Nothing for :-1 SETs, :0 / :-1 deletes, GETs and errors.
	other.call("SET", "k", "w", "NX")
	other.call("SET", "k", "w", "NEX")
	other.call("VDEL", "k", "w")
	other.call("GET", "k")
	other.call("SET", "k", "w", "BAD")
	other.call("SET", "k", "w", "PX", "0")
	other.call("DEL", "absent")
	c.expectNotes()

	// Registrations survive delete and re-create.
	other.call("DEL", "k")
	other.call("DEL", "k")
	other.call("SET", "k", "v3")
	c.expectNotes("k DELETE", "k SET v3")

	// Nothing after STOP: change k, then a second registered key; only the
	// second one's notification may arrive (one connection keeps order).
	c.keyNotify("k2")
	expectPayload(t, c.call("KEYNOTIFY", "k", "STOP"), "+OK\r\n")
	other.call("SET", "k", "after-stop")
	other.call("DEL", "k")
	other.call("SET", "k2", "x")
	if n := c.nextNote(); string(n.key) != "k2" || n.op != resp.OpSet {
		t.Fatalf("got %s %q after STOP, want only k2's SET", n.op, n.key)
	}
	c.expectNotes()
}

func TestP25_RegistrationsDropOnDisconnect(t *testing.T) {
	b := brokertest.Start(t)
	other := dial(t, b)
	c := dial(t, b, withID("watcher"))
	c.keyNotify("k", "k2")
	if s := b.Stats(); s.Registrations != 2 {
		t.Fatalf("%d registrations, want 2", s.Registrations)
	}
	c.close()
	testutil.WaitFor(t, "registrations to be dropped", func() bool { return b.Stats().Registrations == 0 })

	c2 := dial(t, b, withID("watcher"))
	other.call("SET", "k", "unwatched")
	c2.expectNotes()
	c2.keyNotify("k")
	other.call("SET", "k", "watched")
	c2.expectNotes("k SET watched")
}

func TestSessionTakeoverKeepsTheNewConnectionsRegistrations(t *testing.T) {
	b := brokertest.Start(t)
	other := dial(t, b)
	old := dial(t, b, withID("same-id"))
	old.keyNotify("shared", "only-old")
	// The new connection takes the session over and registers at once,
	// racing the old connection's disconnect handling.
	cur := dial(t, b, withID("same-id"))
	cur.keyNotify("shared")
	testutil.WaitFor(t, "the old connection's registrations to go", func() bool { return b.Stats().Registrations == 1 })
	other.call("SET", "only-old", "x")
	other.call("SET", "shared", "y")
	cur.expectNotes("shared SET y")
}

func TestP26_NotifyWithoutSubscriptionAndExactlyOnce(t *testing.T) {
	b := brokertest.Start(t)
	goSDK := dial(t, b)                       // no notify subscription
	rustSDK := dial(t, b, withNotifySub(1))   // subscribed QoS 1
	qos0 := dial(t, b, withNotifySub(0))      // subscribed QoS 0
	wide := dial(t, b)                        // subscribed to all notify topics of its id
	wide.subscribe("clients/statestore/#", 1) // matches, but must not double either
	clients := []*client{goSDK, rustSDK, qos0, wide}
	for _, c := range clients {
		c.keyNotify("k")
	}
	other := dial(t, b)
	other.call("SET", "k", "v")
	other.call("DEL", "k")
	for _, c := range clients {
		got := c.expectNotes("k SET v", "k DELETE")
		wantQoS := byte(1)
		if c == qos0 {
			wantQoS = 0
		}
		if got[0].pub.QoS != wantQoS {
			t.Errorf("client %s: QoS %d, want %d", c.id, got[0].pub.QoS, wantQoS)
		}
		if s := c.strays(); len(s) != 0 {
			t.Errorf("client %s: %d extra publishes", c.id, len(s))
		}
	}
}

func TestP31_Quota(t *testing.T) {
	b := brokertest.Start(t, func(cfg *broker.Config) { cfg.Quota = 3 })
	c := dial(t, b)
	for _, k := range []string{"a", "b", "c"} {
		c.set(k, "v")
	}
	expectPayload(t, c.call("SET", "d", "v"), errText(wire.ErrTextQuotaExceeded))
	expectPayload(t, c.call("SET", "d", "v", "NX"), errText(wire.ErrTextQuotaExceeded))
	c.set("a", "updated")
	expectPayload(t, c.call("GET", "d"), "$-1\r\n")
	expectPayload(t, c.call("DEL", "b"), ":1\r\n")
	c.set("d", "v")
	// An expired key no longer counts.
	expectPayload(t, c.call("SET", "e", "v"), errText(wire.ErrTextQuotaExceeded))
	expectPayload(t, c.call("SET", "c", "v", "PX", "1"), "+OK\r\n")
	testutil.WaitFor(t, "the expired key to be reaped", func() bool { return b.Keys() == 2 })
	c.set("e", "v")
	if b.Keys() != 3 {
		t.Fatalf("%d keys, want 3", b.Keys())
	}
}
