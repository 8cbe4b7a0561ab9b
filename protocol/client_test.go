package protocol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"

	"github.com/ssrun/ssrun/internal/testnet"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// answerAll gives each command a canned success reply (no store behind it).
func answerAll(ts string) func(packets.Packet) []packets.Packet {
	return func(req packets.Packet) []packets.Packet {
		args, err := resp.ParseRequest(req.Payload)
		if err != nil {
			return []packets.Packet{response(req, "-ERR syntax error\r\n", wire.PropStatus, "200")}
		}
		payload := "+OK\r\n"
		switch string(args[0]) {
		case "GET":
			payload = "$-1\r\n"
		case "DEL", "VDEL":
			payload = ":1\r\n"
		}
		return []packets.Packet{response(req, payload, wire.PropStatus, "200", wire.PropTimestamp, ts)}
	}
}

// The full property set of §2 on every request, and the exact payloads of §15.
func TestRequestProperties(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	c := connect(t, s.addr, func(cfg *Config) { cfg.ClientID = "myclient" })
	ft := hlc.HLC{Wall: 1_731_999_999_000, Counter: 3, Node: "lock-node"}
	key := []byte("SETKEY2")
	tests := []struct {
		name    string
		call    func(ctx context.Context) error
		payload string
		expiry  uint32
		ft      bool
		persist bool
	}{
		{"set", func(ctx context.Context) error {
			_, err := c.Set(ctx, key, []byte("VALUE5"), SetOptions{})
			return err
		}, "*3\r\n$3\r\nSET\r\n$7\r\nSETKEY2\r\n$6\r\nVALUE5\r\n", 10, false, false},
		{"set nx", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("testkey"), []byte("testvalue"), SetOptions{Condition: CondNX})
			return err
		}, "*4\r\n$3\r\nSET\r\n$7\r\ntestkey\r\n$9\r\ntestvalue\r\n$2\r\nNX\r\n", 10, false, false},
		{"set nex", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("testkey"), []byte("testvalue"), SetOptions{Condition: CondNEX})
			return err
		}, "*4\r\n$3\r\nSET\r\n$7\r\ntestkey\r\n$9\r\ntestvalue\r\n$3\r\nNEX\r\n", 10, false, false},
		{"set px", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("testkey"), []byte("testvalue"), SetOptions{Expiry: 10 * time.Millisecond})
			return err
		}, "*5\r\n$3\r\nSET\r\n$7\r\ntestkey\r\n$9\r\ntestvalue\r\n$2\r\nPX\r\n$2\r\n10\r\n", 10, false, false},
		{"set sub-millisecond px is 1 ms", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("k"), []byte("v"), SetOptions{Expiry: time.Microsecond})
			return err
		}, "*5\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nPX\r\n$1\r\n1\r\n", 10, false, false},
		{"set nx px", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("key"), []byte("value"), SetOptions{Condition: CondNX, Expiry: time.Second})
			return err
		}, "*6\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1000\r\n", 10, false, false},
		{"set nex px fenced persisted, 2.5 s timeout", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("LockName"), []byte("Client1"), SetOptions{
				Condition: CondNEX, Expiry: 10 * time.Second, FencingToken: ft, Persist: true, Timeout: 2500 * time.Millisecond,
			})
			return err
		}, "*6\r\n$3\r\nSET\r\n$8\r\nLockName\r\n$7\r\nClient1\r\n$3\r\nNEX\r\n$2\r\nPX\r\n$5\r\n10000\r\n", 3, true, true},
		{"set empty value", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("key"), nil, SetOptions{})
			return err
		}, "*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$0\r\n\r\n", 10, false, false},
		{"set binary value", func(ctx context.Context) error {
			_, err := c.Set(ctx, []byte("k"), []byte("a\r\nb"), SetOptions{})
			return err
		}, "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n", 10, false, false},
		{"get", func(ctx context.Context) error {
			_, err := c.Get(ctx, key, CallOptions{})
			return err
		}, "*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n", 10, false, false},
		{"get, 300 ms timeout", func(ctx context.Context) error {
			_, err := c.Get(ctx, key, CallOptions{Timeout: 300 * time.Millisecond})
			return err
		}, "*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n", 1, false, false},
		{"get, context deadline shorter than the timeout", func(ctx context.Context) error {
			ctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
			defer cancel()
			_, err := c.Get(ctx, key, CallOptions{})
			return err
		}, "*2\r\n$3\r\nGET\r\n$7\r\nSETKEY2\r\n", 2, false, false},
		{"del fenced", func(ctx context.Context) error {
			_, err := c.Del(ctx, key, DelOptions{FencingToken: ft})
			return err
		}, "*2\r\n$3\r\nDEL\r\n$7\r\nSETKEY2\r\n", 10, true, false},
		{"vdel fenced", func(ctx context.Context) error {
			_, err := c.VDel(ctx, key, []byte("ABC"), DelOptions{FencingToken: ft})
			return err
		}, "*3\r\n$4\r\nVDEL\r\n$7\r\nSETKEY2\r\n$3\r\nABC\r\n", 10, true, false},
		{"keynotify", func(ctx context.Context) error {
			return c.KeyNotify(ctx, []byte("SOMEKEY"), CallOptions{})
		}, "*2\r\n$9\r\nKEYNOTIFY\r\n$7\r\nSOMEKEY\r\n", 10, false, false},
		{"keynotify stop", func(ctx context.Context) error {
			_, err := c.KeyNotifyStop(ctx, []byte("SOMEKEY"), CallOptions{})
			return err
		}, "*3\r\n$9\r\nKEYNOTIFY\r\n$7\r\nSOMEKEY\r\n$4\r\nSTOP\r\n", 10, false, false},
	}
	var lastTS hlc.HLC
	seen := map[string]bool{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := len(s.requestLog())
			if err := tc.call(context.Background()); err != nil {
				t.Fatal(err)
			}
			log := s.requestLog()
			if len(log) != before+1 {
				t.Fatalf("%d requests sent, want 1", len(log)-before)
			}
			req := log[before]
			if got := string(req.Payload); got != tc.payload {
				t.Errorf("payload %q, want %q", got, tc.payload)
			}
			if req.FixedHeader.Qos != 1 || req.FixedHeader.Retain {
				t.Errorf("qos %d retain %v, want 1 false", req.FixedHeader.Qos, req.FixedHeader.Retain)
			}
			p := req.Properties
			if p.ResponseTopic != wire.ResponseTopic("myclient") {
				t.Errorf("response topic %q", p.ResponseTopic)
			}
			cd := p.CorrelationData
			if len(cd) != 16 || cd[6]>>4 != 4 || cd[8]>>6 != 2 {
				t.Errorf("correlation data %x is not a UUID v4", cd)
			}
			if seen[string(cd)] {
				t.Errorf("correlation data %x reused", cd)
			}
			seen[string(cd)] = true
			if p.ContentType != wire.ContentType {
				t.Errorf("content type %q", p.ContentType)
			}
			if !p.PayloadFormatFlag || p.PayloadFormat != 0 {
				t.Errorf("payload format %v/%d, want present 0", p.PayloadFormatFlag, p.PayloadFormat)
			}
			if p.MessageExpiryInterval != tc.expiry {
				t.Errorf("message expiry %d, want %d", p.MessageExpiryInterval, tc.expiry)
			}
			want := []string{wire.PropSourceID, wire.PropTimestamp, wire.PropProtVer, wire.PropPartition}
			if tc.ft {
				want = append(want, wire.PropFencingToken)
			}
			if tc.persist {
				want = append(want, wire.PropPersistence)
			}
			var keys []string
			for _, u := range p.User {
				keys = append(keys, u.Key)
			}
			if fmt.Sprint(keys) != fmt.Sprint(want) {
				t.Errorf("user properties %v, want %v", keys, want)
			}
			for k, v := range map[string]string{wire.PropSourceID: "myclient", wire.PropPartition: "myclient", wire.PropProtVer: "1.0"} {
				if got, _ := userOf(req, k); got != v {
					t.Errorf("%s = %q, want %q", k, got, v)
				}
			}
			if tc.ft {
				if got, _ := userOf(req, wire.PropFencingToken); got != ft.String() {
					t.Errorf("__ft = %q, want %q", got, ft)
				}
			}
			if tc.persist {
				if got, _ := userOf(req, wire.PropPersistence); got != "true" {
					t.Errorf("aio-persistence = %q", got)
				}
			}
			raw, _ := userOf(req, wire.PropTimestamp)
			ts, err := hlc.Parse(raw)
			if err != nil {
				t.Fatalf("__ts: %v", err)
			}
			if ts.Node != c.clock.Node() || ts.Compare(lastTS) <= 0 {
				t.Errorf("__ts %s does not advance the client clock past %s", ts, lastTS)
			}
			lastTS = ts
		})
	}
}

// A client with a session expiry makes paho send CONNECT properties; without
// RequestProblemInfo=true mochi would then strip __stat from every response.
func TestRequestProblemInfoKeepsResponseProperties(t *testing.T) {
	for _, expiry := range []uint32{0, 60} {
		t.Run(fmt.Sprint("session expiry ", expiry), func(t *testing.T) {
			s := startScript(t, answerAll("001732000000000:00001:StateStore"))
			c := connect(t, s.addr, func(cfg *Config) { cfg.SessionExpiry = expiry })
			if _, err := c.Set(context.Background(), []byte("k"), []byte("v"), SetOptions{}); err != nil {
				t.Fatal(err)
			}
			cp := s.connectLog()[0]
			// Absent means 1 (MQTT-3.1.2-29's default); paho omits it when true.
			if cp.Properties.RequestProblemInfoFlag && cp.Properties.RequestProblemInfo == 0 {
				t.Errorf("CONNECT carries RequestProblemInfo = 0")
			}
			if cp.Properties.SessionExpiryInterval != expiry {
				t.Errorf("session expiry %d, want %d", cp.Properties.SessionExpiryInterval, expiry)
			}
		})
	}
}

// Every §8 text surfaces as its sentinel, the text kept; unknown texts too.
func TestServiceErrors(t *testing.T) {
	s := startScript(t, nil)
	c := connect(t, s.addr)
	tests := []struct {
		text string
		want error
	}{
		{wire.ErrTextTimestampSkew, ErrTimestampSkew},
		{wire.ErrTextMissingFencingToken, ErrMissingFencingToken},
		{wire.ErrTextFencingTokenSkew, ErrFencingTokenSkew},
		{wire.ErrTextFencingTokenLower, ErrFencingTokenLowerVersion},
		{wire.ErrTextQuotaExceeded, ErrQuotaExceeded},
		{wire.ErrTextSyntax, ErrSyntax},
		{wire.ErrTextNotAuthorized, ErrNotAuthorized},
		{wire.ErrTextUnknownCommand, ErrUnknownCommand},
		{wire.ErrTextWrongNumberOfArgs, ErrWrongNumberOfArguments},
		{wire.ErrTextTimestampMissing, ErrTimestampMissing},
		{wire.ErrTextTimestampMalformed, ErrTimestampMalformed},
		{wire.ErrTextKeyLengthZero, ErrKeyLengthZero},
		{"the broker is on fire", ErrUnknownServiceError},
		{"Syntax Error", ErrUnknownServiceError}, // exact match only
	}
	if len(serviceErrors) != 12 {
		t.Fatalf("%d service error texts mapped, want the 12 of §8", len(serviceErrors))
	}
	calls := map[string]func() error{
		"get": func() error { _, err := c.Get(context.Background(), []byte("k"), CallOptions{}); return err },
		"set": func() error {
			_, err := c.Set(context.Background(), []byte("k"), []byte("v"), SetOptions{})
			return err
		},
		"del": func() error { _, err := c.Del(context.Background(), []byte("k"), DelOptions{}); return err },
		"vdel": func() error {
			_, err := c.VDel(context.Background(), []byte("k"), []byte("v"), DelOptions{})
			return err
		},
		"keynotify": func() error { return c.KeyNotify(context.Background(), []byte("k"), CallOptions{}) },
		"keynotify stop": func() error {
			_, err := c.KeyNotifyStop(context.Background(), []byte("k"), CallOptions{})
			return err
		},
	}
	for _, tc := range tests {
		s.setHandler(ok200("-ERR "+tc.text+"\r\n", ""))
		for name, call := range calls {
			err := call()
			if !errors.Is(err, tc.want) {
				t.Errorf("%s with -ERR %q: error %v, want %v", name, tc.text, err, tc.want)
			}
			var se *ServiceError
			if !errors.As(err, &se) || se.Text != tc.text {
				t.Errorf("%s with -ERR %q: ServiceError %+v", name, tc.text, se)
			}
			for _, other := range tests {
				if other.want != tc.want && errors.Is(err, other.want) {
					t.Errorf("%s with -ERR %q also matches %v", name, tc.text, other.want)
				}
			}
		}
	}
	if c.watched["k"] != nil {
		t.Error("a failed KeyNotify left its key in the reconnect set")
	}
}

// An empty key is refused locally: no request is sent.
func TestEmptyKeyRejectedLocally(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	c := connect(t, s.addr)
	ctx := context.Background()
	errs := map[string]error{}
	_, errs["get"] = c.Get(ctx, nil, CallOptions{})
	_, errs["set"] = c.Set(ctx, []byte{}, []byte("v"), SetOptions{})
	_, errs["del"] = c.Del(ctx, nil, DelOptions{})
	_, errs["vdel"] = c.VDel(ctx, nil, []byte("v"), DelOptions{})
	errs["keynotify"] = c.KeyNotify(ctx, nil, CallOptions{})
	_, errs["keynotify stop"] = c.KeyNotifyStop(ctx, nil, CallOptions{})
	for name, err := range errs {
		if !errors.Is(err, ErrKeyLengthZero) {
			t.Errorf("%s with an empty key: %v, want ErrKeyLengthZero", name, err)
		}
	}
	if n := len(s.requestLog()); n != 0 {
		t.Errorf("%d requests sent for empty keys", n)
	}
}

// Each command accepts exactly the reply shapes of §7 and reports anything
// else as ErrUnexpectedReply.
func TestReplyShapes(t *testing.T) {
	s := startScript(t, nil)
	c := connect(t, s.addr)
	ctx := context.Background()
	const ts = "001732000000000:00007:StateStore"
	ver := hlc.HLC{Wall: 1_732_000_000_000, Counter: 7, Node: "StateStore"}
	get := func() (any, error) { return c.Get(ctx, []byte("k"), CallOptions{}) }
	set := func() (any, error) { return c.Set(ctx, []byte("k"), []byte("v"), SetOptions{Condition: CondNX}) }
	del := func() (any, error) { return c.Del(ctx, []byte("k"), DelOptions{}) }
	vdel := func() (any, error) { return c.VDel(ctx, []byte("k"), []byte("v"), DelOptions{}) }
	notify := func() (any, error) { return nil, c.KeyNotify(ctx, []byte("k"), CallOptions{}) }
	stop := func() (any, error) { return c.KeyNotifyStop(ctx, []byte("k"), CallOptions{}) }
	tests := []struct {
		name    string
		call    func() (any, error)
		payload string
		ts      string
		want    any // expected result when err is nil
		wantErr error
	}{
		{"get hit", get, "$4\r\n1234\r\n", ts, GetResult{Value: []byte("1234"), Version: ver, Found: true}, nil},
		{"get empty value", get, "$0\r\n\r\n", ts, GetResult{Value: []byte{}, Version: ver, Found: true}, nil},
		{"get binary value", get, "$5\r\n\x00\r\n\n\r\r\n", ts, GetResult{Value: []byte("\x00\r\n\n\r"), Version: ver, Found: true}, nil},
		{"get miss", get, "$-1\r\n", "", GetResult{}, nil},
		{"get miss as :0", get, ":0\r\n", "", GetResult{}, nil},
		{"get miss as :-1", get, ":-1\r\n", "", GetResult{}, nil},
		{"get hit without version", get, "$1\r\nx\r\n", "", nil, ErrUnexpectedReply},
		{"get +OK", get, "+OK\r\n", ts, nil, ErrUnexpectedReply},
		{"get :1", get, ":1\r\n", ts, nil, ErrUnexpectedReply},
		{"set applied", set, "+OK\r\n", ts, SetResult{Applied: true, Version: ver}, nil},
		{"set not applied", set, ":-1\r\n", ts, SetResult{Applied: false, Version: ver}, nil},
		{"set not applied as $-1", set, "$-1\r\n", ts, SetResult{Applied: false, Version: ver}, nil},
		{"set without version", set, "+OK\r\n", "", nil, ErrUnexpectedReply},
		{"set :1", set, ":1\r\n", ts, nil, ErrUnexpectedReply},
		{"set +QUEUED", set, "+QUEUED\r\n", ts, nil, ErrUnexpectedReply},
		{"set S-style -1", set, "-1\r\n", ts, nil, ErrUnknownServiceError},
		{"del removed", del, ":1\r\n", ts, int64(1), nil},
		{"del absent", del, ":0\r\n", "", int64(0), nil},
		{"del -1", del, ":-1\r\n", "", nil, ErrUnexpectedReply},
		{"del +OK", del, "+OK\r\n", "", nil, ErrUnexpectedReply},
		{"del :2", del, ":2\r\n", "", nil, ErrUnexpectedReply},
		{"vdel removed", vdel, ":1\r\n", ts, int64(1), nil},
		{"vdel absent", vdel, ":0\r\n", "", int64(0), nil},
		{"vdel mismatch", vdel, ":-1\r\n", ts, int64(-1), nil},
		{"vdel bulk", vdel, "$1\r\n1\r\n", "", nil, ErrUnexpectedReply},
		{"keynotify ok", notify, "+OK\r\n", "", nil, nil},
		{"keynotify :0", notify, ":0\r\n", "", nil, nil},
		{"keynotify :1", notify, ":1\r\n", "", nil, ErrUnexpectedReply},
		{"keynotify stop registered", stop, "+OK\r\n", "", true, nil},
		{"keynotify stop not registered", stop, ":0\r\n", "", false, nil},
		{"keynotify stop $-1", stop, "$-1\r\n", "", false, nil},
		{"keynotify stop :-1", stop, ":-1\r\n", "", nil, ErrUnexpectedReply},
		{"empty payload", get, "", "", nil, ErrUnexpectedReply},
		{"garbage payload", get, "hello", "", nil, ErrUnexpectedReply},
		{"trailing bytes", set, "+OK\r\n+OK\r\n", ts, nil, ErrUnexpectedReply},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.setHandler(ok200(tc.payload, tc.ts))
			got, err := tc.call()
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("error %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil && fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tc.want) {
				t.Errorf("got %#v, want %#v", got, tc.want)
			}
		})
	}
}

// Response properties other than the payload: status, content type,
// protocol version, timestamp.
func TestResponseProperties(t *testing.T) {
	s := startScript(t, nil)
	c := connect(t, s.addr)
	tests := []struct {
		name    string
		user    []string
		ct      string
		wantErr error
	}{
		{"minimal", []string{wire.PropStatus, "200"}, wire.ContentType, nil},
		{"no content type", []string{wire.PropStatus, "200"}, "", nil},
		{"content type with parameters", []string{wire.PropStatus, "200"}, wire.ContentType + ";v=1", nil},
		{"protocol 1.3", []string{wire.PropStatus, "200", wire.PropProtVer, "1.3"}, wire.ContentType, nil},
		{"no status", nil, wire.ContentType, ErrUnexpectedReply},
		{"status not a number", []string{wire.PropStatus, "OK"}, wire.ContentType, ErrUnexpectedReply},
		{"status 404", []string{wire.PropStatus, "404"}, wire.ContentType, ErrStatus},
		{"other content type", []string{wire.PropStatus, "200"}, "text/plain", ErrUnexpectedReply},
		{"protocol 2.0", []string{wire.PropStatus, "200", wire.PropProtVer, "2.0"}, wire.ContentType, ErrUnexpectedReply},
		{"protocol bare 1", []string{wire.PropStatus, "200", wire.PropProtVer, "1"}, wire.ContentType, ErrUnexpectedReply},
		{"malformed __ts", []string{wire.PropStatus, "200", wire.PropTimestamp, "12:ab:x"}, wire.ContentType, ErrUnexpectedReply},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.setHandler(func(req packets.Packet) []packets.Packet {
				pk := response(req, ":0\r\n", tc.user...)
				pk.Properties.ContentType = tc.ct
				return []packets.Packet{pk}
			})
			_, err := c.Del(context.Background(), []byte("k"), DelOptions{})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
		})
	}
}

func TestStatusError(t *testing.T) {
	s := startScript(t, func(req packets.Packet) []packets.Packet {
		return []packets.Packet{response(req, "", wire.PropStatus, "505", wire.PropStatusMsg, "no such version",
			wire.PropRequestVer, "1.0", wire.PropSupportedVer, "2 3")}
	})
	c := connect(t, s.addr)
	_, err := c.Get(context.Background(), []byte("k"), CallOptions{})
	var se *StatusError
	if !errors.As(err, &se) || !errors.Is(err, ErrStatus) {
		t.Fatalf("error %v, want a *StatusError", err)
	}
	want := StatusError{Code: 505, Kind: StatusUnsupportedVersion, Message: "no such version", RequestProtocolVersion: "1.0", SupportedMajorVersions: "2 3"}
	if *se != want {
		t.Errorf("got %+v, want %+v", *se, want)
	}
}

// The client clock merges every response __ts and refuses one more than a
// minute ahead of its wall clock.
func TestResponseVersionAdvancesClock(t *testing.T) {
	now := time.UnixMilli(1_732_000_000_000)
	s := startScript(t, nil)
	c := connect(t, s.addr, func(cfg *Config) { cfg.Now = func() time.Time { return now } })
	ctx := context.Background()

	ahead := hlc.HLC{Wall: now.UnixMilli() + 30_000, Counter: 5, Node: "StateStore"}
	s.setHandler(ok200("+OK\r\n", ahead.String()))
	res, err := c.Set(ctx, []byte("k"), []byte("v"), SetOptions{})
	if err != nil || res.Version != ahead {
		t.Fatalf("set = %+v, %v; want version %s", res, err, ahead)
	}
	if _, err := c.Set(ctx, []byte("k"), []byte("v"), SetOptions{}); err != nil {
		t.Fatal(err)
	}
	log := s.requestLog()
	ts, _ := userOf(log[len(log)-1], wire.PropTimestamp)
	if want := (hlc.HLC{Wall: ahead.Wall, Counter: 6, Node: c.clock.Node()}).String(); ts != want {
		t.Errorf("next request __ts %s, want %s", ts, want)
	}

	tooFar := hlc.HLC{Wall: now.UnixMilli() + 61_000, Node: "StateStore"}
	s.setHandler(ok200("+OK\r\n", tooFar.String()))
	if _, err := c.Set(ctx, []byte("k"), []byte("v"), SetOptions{}); !errors.Is(err, hlc.ErrSkew) {
		t.Fatalf("set with a version 61 s ahead: %v, want hlc.ErrSkew", err)
	}
	if got := c.clock.Now(); got.Wall != ahead.Wall {
		t.Errorf("clock moved to %s on a refused version", got)
	}
	if got := c.Now(); got.Wall != ahead.Wall || got.Node != c.clock.Node() {
		t.Errorf("Now() = %s, want the clock's value at wall %d (the merged version's)", got, ahead.Wall)
	}
}

// Responses answered in reverse order still reach their own callers.
func TestCorrelationOutOfOrder(t *testing.T) {
	const n = 50
	var mu sync.Mutex
	var held []packets.Packet
	s := startScript(t, func(req packets.Packet) []packets.Packet {
		mu.Lock()
		defer mu.Unlock()
		held = append(held, req)
		if len(held) < n {
			return nil
		}
		var out []packets.Packet
		for i := len(held) - 1; i >= 0; i-- {
			args, _ := resp.ParseRequest(held[i].Payload)
			out = append(out, response(held[i], string(resp.AppendBulk(nil, append([]byte("value of "), args[1]...))),
				wire.PropStatus, "200", wire.PropTimestamp, "001732000000000:00001:StateStore"))
		}
		held = nil
		return out
	})
	c := connect(t, s.addr)
	testutil.InFlight(t, n, n, func(_, i int) error { // all n in flight: the broker holds them until then
		key := fmt.Sprint("key-", i)
		res, err := c.Get(context.Background(), []byte(key), CallOptions{})
		if err == nil && string(res.Value) != "value of "+key {
			err = fmt.Errorf("get %s returned %q", key, res.Value)
		}
		return err
	})
	if c.pendingLen() != 0 {
		t.Errorf("%d pending entries left", c.pendingLen())
	}
}

// The correlation entry goes away on every path: timeout, cancel, success,
// and a late response to a timed-out call is counted, not delivered.
func TestPendingRemovedOnTimeoutAndCancel(t *testing.T) {
	s := startScript(t, nil) // never answers
	c := connect(t, s.addr)

	_, err := c.Get(context.Background(), []byte("k"), CallOptions{Timeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrTimeout) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want ErrTimeout and context.DeadlineExceeded", err)
	}
	if c.pendingLen() != 0 {
		t.Fatalf("%d pending entries after a timeout", c.pendingLen())
	}
	if st := c.Stats(); st.Timeouts != 1 || st.Requests != 1 {
		t.Errorf("stats %+v, want 1 request, 1 timeout", st)
	}
	// Answer the timed-out request now: nobody waits for it.
	s.inject(response(s.requestLog()[0], "$-1\r\n", wire.PropStatus, "200"))
	testutil.WaitFor(t, "the late response to be counted", func() bool { return c.Stats().UnmatchedResponses == 1 })

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Get(ctx, []byte("k"), CallOptions{Timeout: time.Minute})
		done <- err
	}()
	testutil.WaitFor(t, "the second request", func() bool { return len(s.requestLog()) == 2 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	if c.pendingLen() != 0 {
		t.Fatalf("%d pending entries after a cancel", c.pendingLen())
	}

	ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	if _, err := c.Get(ctx, []byte("k"), CallOptions{Timeout: time.Minute}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want context.DeadlineExceeded", err)
	}
	if c.pendingLen() != 0 {
		t.Fatalf("%d pending entries after a context deadline", c.pendingLen())
	}

	s.setHandler(func(req packets.Packet) []packets.Packet { // answered twice
		r := response(req, "$-1\r\n", wire.PropStatus, "200")
		return []packets.Packet{r, r}
	})
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{}); err != nil {
		t.Fatal(err)
	}
	if c.pendingLen() != 0 {
		t.Fatalf("%d pending entries after a success", c.pendingLen())
	}
	testutil.WaitFor(t, "the second answer to be counted", func() bool {
		st := c.Stats()
		return st.UnmatchedResponses == 2
	})
}

// A client that cannot connect fails calls at once with ErrNotConnected.
func TestNotConnectedFailsFast(t *testing.T) {
	s := startScript(t, nil)
	p := testnet.NewProxy(t, s.addr)
	p.Cut()
	c := newTestClient(t, p.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := c.AwaitConnection(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("AwaitConnection: %v, want deadline exceeded", err)
	}
	// A minute-long timeout: only failing fast lets this test finish.
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{Timeout: time.Minute}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("get: %v, want ErrNotConnected", err)
	}
	if err := c.KeyNotify(context.Background(), []byte("k"), CallOptions{Timeout: time.Minute}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("keynotify: %v, want ErrNotConnected", err)
	}
	if st := c.Stats(); st.NotConnected != 2 || st.Requests != 0 || st.Pending != 0 {
		t.Errorf("stats %+v", st)
	}
	s.setHandler(answerAll("001732000000000:00001:StateStore"))
	p.Heal()
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatalf("event %v, want connected", e.Kind)
	}
	// The KEYNOTIFY refused while disconnected was sent before EventConnected.
	log := s.requestLog()
	if len(log) != 1 || string(log[0].Payload) != "*2\r\n$9\r\nKEYNOTIFY\r\n$1\r\nk\r\n" {
		t.Errorf("requests on connecting: %d, want the KEYNOTIFY of k", len(log))
	}
}

// Calls pending when the connection drops fail promptly with
// ErrConnectionLost (not at their minute-long timeout), the client reports
// the outage as events, and reconnects.
func TestConnectionLossFailsPendingCalls(t *testing.T) {
	s := startScript(t, nil) // never answers
	p := testnet.NewProxy(t, s.addr)
	c := connect(t, p.Addr())
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatalf("first event %v, want connected", e.Kind)
	}
	const n = 20
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Set(context.Background(), []byte("k"), []byte("v"), SetOptions{Timeout: time.Minute})
			errs <- err
		}()
	}
	testutil.WaitFor(t, "the requests to reach the broker", func() bool { return len(s.requestLog()) == n })
	p.Cut()
	for range n {
		if err := <-errs; !errors.Is(err, ErrConnectionLost) {
			t.Errorf("pending call: %v, want ErrConnectionLost", err)
		}
	}
	if c.pendingLen() != 0 {
		t.Fatalf("%d pending entries after the connection dropped", c.pendingLen())
	}
	e := nextEvent(t, c)
	if e.Kind != EventDisconnected || !errors.Is(e.Err, ErrConnectionLost) {
		t.Fatalf("event %v (%v), want disconnected with ErrConnectionLost", e.Kind, e.Err)
	}
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{Timeout: time.Minute}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("call during the outage: %v, want ErrNotConnected", err)
	}
	s.waitGone(c.ClientID())
	p.Heal()
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatalf("event %v, want connected", e.Kind)
	}
	s.setHandler(answerAll("001732000000000:00001:StateStore"))
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{}); err != nil {
		t.Fatalf("call after reconnecting: %v", err)
	}
	if st := c.Stats(); st.ConnectionLost != n || st.Reconnects != 1 {
		t.Errorf("stats %+v, want %d connection-lost calls and 1 reconnect", st, n)
	}
}

// Close fails pending calls with ErrClosed, refuses later calls, closes the
// event stream and leaves no goroutine behind (TestMain runs goleak).
func TestClose(t *testing.T) {
	s := startScript(t, nil)
	c := connect(t, s.addr)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Get(context.Background(), []byte("k"), CallOptions{Timeout: time.Minute})
		errc <- err
	}()
	testutil.WaitFor(t, "the request", func() bool { return len(s.requestLog()) == 1 })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("pending call: %v, want ErrClosed", err)
	}
	if c.pendingLen() != 0 {
		t.Fatalf("%d pending entries after Close", c.pendingLen())
	}
	if _, err := c.Set(context.Background(), []byte("k"), nil, SetOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after Close: %v, want ErrClosed", err)
	}
	if err := c.AwaitConnection(context.Background()); !errors.Is(err, ErrClosed) {
		t.Fatalf("AwaitConnection after Close: %v", err)
	}
	for range c.Events() { // drains to the close
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Ending the context given to New acts like Close for calls.
func TestNewContextEnds(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	ctx, cancel := context.WithCancel(context.Background())
	c, err := New(ctx, Config{Servers: []string{s.addr}, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.AwaitConnection(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after the context ended: %v, want ErrClosed", err)
	}
}

// Credentials are read before every connection attempt and sent in CONNECT,
// enhanced-auth fields included; a failing read skips the attempt.
func TestCredentialsReadPerAttempt(t *testing.T) {
	s := startScript(t, nil)
	p := testnet.NewProxy(t, s.addr)
	var calls atomic.Int32
	c := connect(t, p.Addr(), func(cfg *Config) {
		cfg.Credentials = func() (Credentials, error) {
			n := calls.Add(1)
			if n == 1 {
				return Credentials{}, errors.New("token file not there yet")
			}
			return Credentials{
				Username: "user", Password: []byte(fmt.Sprint("p", n)),
				AuthMethod: "K8S-SAT", AuthData: []byte(fmt.Sprint("token-", n)),
			}, nil
		}
	})
	check := func() {
		t.Helper()
		log := s.connectLog()
		cp := log[len(log)-1]
		n := calls.Load()
		if cp.Connect.Username == nil || string(cp.Connect.Username) != "user" || string(cp.Connect.Password) != fmt.Sprint("p", n) {
			t.Errorf("CONNECT user %q password %q, want user/p%d", cp.Connect.Username, cp.Connect.Password, n)
		}
		if cp.Properties.AuthenticationMethod != "K8S-SAT" || string(cp.Properties.AuthenticationData) != fmt.Sprint("token-", n) {
			t.Errorf("CONNECT auth %q %q, want K8S-SAT token-%d", cp.Properties.AuthenticationMethod, cp.Properties.AuthenticationData, n)
		}
	}
	if len(s.connectLog()) != 1 {
		t.Fatalf("%d CONNECTs, want 1 (the failing credentials read skips its attempt)", len(s.connectLog()))
	}
	check()
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	p.Cut()
	if e := nextEvent(t, c); e.Kind != EventDisconnected {
		t.Fatal(e.Kind)
	}
	s.waitGone(c.ClientID())
	p.Heal()
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	if len(s.connectLog()) != 2 || calls.Load() < 3 {
		t.Fatalf("%d CONNECTs after %d credential reads", len(s.connectLog()), calls.Load())
	}
	check()
}

func TestConfigValidation(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string // error substring; "" = valid
	}{
		{"host:port", Config{Servers: []string{"127.0.0.1:1"}}, ""},
		{"mqtt and mqtts", Config{Servers: []string{"mqtt://a:1", "mqtts://b:8883"}}, ""},
		{"no servers", Config{}, "no servers"},
		{"bad scheme", Config{Servers: []string{"http://a:1"}}, "scheme"},
		{"no port", Config{Servers: []string{"mqtt://a"}}, "host:port"},
		{"path", Config{Servers: []string{"mqtt://a:1/x"}}, "only scheme"},
		{"negative timeout", Config{Servers: []string{"a:1"}, Timeout: -1}, "timeout"},
		{"negative event buffer", Config{Servers: []string{"a:1"}, EventBuffer: -1}, "event buffer"},
		{"client id with NUL", Config{Servers: []string{"a:1"}, ClientID: "a\x00b"}, "client id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = testLogger()
			c, err := New(context.Background(), tc.cfg)
			if c != nil {
				defer c.Close()
			}
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if !strings.HasPrefix(c.ClientID(), "ssrun-") {
					t.Errorf("default client id %q", c.ClientID())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// Notifications pushed on the notify topic become events in arrival order;
// invalid ones are dropped and counted, duplicates of a watched key
// suppressed.
func TestNotifications(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	c := connect(t, s.addr)
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	id := c.ClientID()
	v := func(counter uint64) hlc.HLC {
		return hlc.HLC{Wall: 1_732_000_000_000, Counter: counter, Node: "StateStore"}
	}
	ts := func(counter uint64) []string { return []string{wire.PropTimestamp, v(counter).String()} }
	set := func(value string) string { return string(resp.AppendNotifySet(nil, []byte(value))) }
	del := string(resp.AppendNotifyDelete(nil))
	if err := c.KeyNotify(context.Background(), []byte("watched"), CallOptions{}); err != nil {
		t.Fatal(err)
	}
	far := []string{wire.PropTimestamp, fmt.Sprintf("%015d:00000:StateStore", time.Now().UnixMilli()+120_000)}
	inject := []struct {
		key, body string
		user      []string
		want      *Event // nil: dropped or suppressed
	}{
		{"a\r\nb", set("x\x00y"), ts(1), &Event{Key: []byte("a\r\nb"), Op: OpSet, Value: []byte("x\x00y"), Version: v(1)}},
		{"watched", set("1"), ts(2), &Event{Key: []byte("watched"), Op: OpSet, Value: []byte("1"), Version: v(2)}},
		{"watched", set("1"), ts(2), nil}, // duplicate
		{"watched", del, ts(3), &Event{Key: []byte("watched"), Op: OpDelete, Version: v(3)}},
		{"watched", del, ts(3), nil}, // duplicate
		{"watched", set("1"), ts(2), &Event{Key: []byte("watched"), Op: OpSet, Value: []byte("1"), Version: v(2)}}, // not a repeat of the last
		{"k", set("no ts"), nil, nil},
		{"k", set("bad ts"), []string{wire.PropTimestamp, "yesterday"}, nil},
		{"k", set("far"), far, nil},
		{"k", "*2\r\n$6\r\nNOTIFY\r\n$6\r\nEXPIRE\r\n", ts(4), nil},
		{"k", "*2\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n", ts(4), nil}, // SET without VALUE
		{"k", "+OK\r\n", ts(4), nil},
		{"k", set(""), ts(5), &Event{Key: []byte("k"), Op: OpSet, Value: []byte{}, Version: v(5)}},
	}
	for _, n := range inject {
		s.inject(notifyPacket(id, []byte(n.key), n.body, n.user...))
	}
	// A notification topic of this client whose key level is not hex.
	s.inject(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1},
		TopicName:   strings.TrimSuffix(wire.NotifyFilter(id), "+") + "XYZ",
		Payload:     []byte(set("v")),
		Properties:  packets.Properties{User: []packets.UserProperty{{Key: wire.PropTimestamp, Val: v(6).String()}}},
	})
	s.inject(notifyPacket(id, []byte("last"), del, ts(7)...))
	delivered := 0
	for _, n := range inject {
		if n.want == nil {
			continue
		}
		delivered++
		e := nextEvent(t, c)
		n.want.Kind = EventNotify
		if fmt.Sprintf("%#v", e) != fmt.Sprintf("%#v", *n.want) {
			t.Errorf("event %#v,\nwant  %#v", e, *n.want)
		}
	}
	if e := nextEvent(t, c); string(e.Key) != "last" {
		t.Fatalf("event %#v, want the one for key last", e)
	}
	st := c.Stats()
	if st.DuplicatesSuppressed != 2 || st.Notifications != uint64(delivered+1) || st.NotificationsDropped != 7 {
		t.Errorf("stats %+v: want 2 duplicates suppressed, %d notifications, 7 dropped", st, delivered+1)
	}
}

// A broker that refuses the notification filter subscription but pushes
// notifications into the session (what AIO does for the Go and .NET SDKs)
// still gets them delivered.
func TestNotificationPushedWithoutSubscription(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	const id = "pushed-client"
	s.refuseSubscribe(wire.NotifyFilter(id))
	c := connect(t, s.addr, func(cfg *Config) { cfg.ClientID = id })
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	if err := c.KeyNotify(context.Background(), []byte("k"), CallOptions{}); err != nil {
		t.Fatal(err)
	}
	s.inject(notifyPacket(id, []byte("k"), string(resp.AppendNotifyDelete(nil)), wire.PropTimestamp, "001732000000000:00002:S"))
	s.push(id, notifyPacket(id, []byte("k"), string(resp.AppendNotifySet(nil, []byte("v"))), wire.PropTimestamp, "001732000000000:00003:S"))
	e := nextEvent(t, c)
	if e.Kind != EventNotify || string(e.Key) != "k" || e.Op != OpSet || string(e.Value) != "v" || e.Version.Counter != 3 {
		t.Fatalf("event %+v, want the pushed SET (the published DELETE has no subscriber)", e)
	}
}

// Calls need the response topic subscription: until a refused SUBSCRIBE is
// retried successfully the client is not ready.
func TestResponseSubscriptionRetried(t *testing.T) {
	s := startScript(t, answerAll("001732000000000:00001:StateStore"))
	const id = "refused-client"
	s.refuseSubscribe(wire.ResponseTopic(id))
	c := newTestClient(t, s.addr, func(cfg *Config) { cfg.ClientID = id })
	testutil.WaitFor(t, "the connection", func() bool { return len(s.connectLog()) == 1 })
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{}); !errors.Is(err, ErrNotConnected) {
		t.Fatalf("get before the response subscription: %v, want ErrNotConnected", err)
	}
	s.refuseSubscribe("")
	if e := nextEvent(t, c); e.Kind != EventConnected {
		t.Fatal(e.Kind)
	}
	if _, err := c.Get(context.Background(), []byte("k"), CallOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Done closes once the client has stopped, after Close or when New's
// context ends; Close says what kept it from ending the session cleanly.
func TestDoneAndCloseReport(t *testing.T) {
	s := startScript(t, nil)
	t.Run("clean", func(t *testing.T) {
		c := connect(t, s.addr)
		select {
		case <-c.Done():
			t.Fatal("Done closed while the client runs")
		default:
		}
		if err := c.Close(); err != nil {
			t.Fatalf("Close = %v", err)
		}
		<-c.Done() // closed once Close returned
		if _, ok := <-c.Events(); ok {
			t.Fatal("Events still open after Done")
		}
	})
	t.Run("context ended", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		c, err := New(ctx, Config{Servers: []string{s.addr}, Logger: testLogger()})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case <-c.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("Done not closed after New's context ended")
		}
		if err := c.Close(); !errors.Is(err, context.Canceled) {
			t.Fatalf("Close after the context ended = %v, want it to say so", err)
		}
	})
	t.Run("not connected", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		_ = ln.Close() // nothing listens there: every attempt is refused
		c := newTestClient(t, addr)
		err = c.Close()
		if err == nil || !strings.Contains(err.Error(), "no DISCONNECT sent") {
			t.Fatalf("Close while never connected = %v, want it to say so", err)
		}
		if again := c.Close(); again != err {
			t.Fatalf("second Close = %v, want the same report", again)
		}
	})
}
