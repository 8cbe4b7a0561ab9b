package broker_test

// Authorization (issue 7, point 3): one test per attack of one
// authenticated user (bob) on another (alice), over real MQTT on a random
// loopback port with a password file; then ACL file grants for keys, their
// reload, and the official SDK topic shapes under the default policy.

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// Reason codes the tests expect.
const (
	rcNotAuthorized    = 0x87
	rcClientIDNotValid = 0x85
	rcBadPassword      = 0x86
)

var (
	alice = withCredentials("alice", "alice-pw")
	bob   = withCredentials("bob", "bob-pw")
)

// authBroker starts a broker with a password file for alice and bob and,
// when acl is not empty, an ACL file with that content (its path is
// returned, to rewrite it).
func authBroker(t *testing.T, acl string, opts ...func(*broker.Config)) (*broker.Broker, string) {
	t.Helper()
	dir := t.TempDir()
	pw := filepath.Join(dir, "passwords")
	lines := "alice:" + cheapHash(t, "alice-pw") + "\nbob:" + cheapHash(t, "bob-pw") + "\n"
	if err := os.WriteFile(pw, []byte(lines), 0o600); err != nil {
		t.Fatal(err)
	}
	aclFile := ""
	if acl != "" {
		aclFile = filepath.Join(dir, "acl.yaml")
		if err := os.WriteFile(aclFile, []byte(acl), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b := brokertest.Start(t, append([]func(*broker.Config){func(c *broker.Config) {
		c.PasswordFile, c.ACLFile = pw, aclFile
	}}, opts...)...)
	return b, aclFile
}

// subscribeCode subscribes c to filter and returns the SUBACK reason code.
func (c *client) subscribeCode(filter string) byte {
	c.t.Helper()
	ctx, cancel := contextWait()
	defer cancel()
	sa, err := c.pc.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: filter, QoS: 1}}})
	if sa == nil {
		c.t.Fatalf("client %s: subscribe %q: %v", c.id, filter, err)
	}
	return sa.Reasons[0]
}

// publishCode publishes p QoS 1 and returns the PUBACK reason code.
func (c *client) publishCode(p *paho.Publish) byte {
	c.t.Helper()
	ctx, cancel := contextWait()
	defer cancel()
	p.QoS = 1
	pr, err := c.pc.Publish(ctx, p)
	if pr == nil {
		c.t.Fatalf("client %s: publish to %q: %v", c.id, p.Topic, err)
	}
	return pr.ReasonCode
}

// noStrays fails if c received any message nobody waited for (after a
// round trip of its own, so that what the broker sent before has arrived).
func (c *client) noStrays() {
	c.t.Helper()
	expectPayload(c.t, c.call("GET", "round-trip"), "$-1\r\n")
	select {
	case p := <-c.stray:
		c.t.Fatalf("client %s received %q on %q", c.id, p.Payload, p.Topic)
	default:
	}
}

// nextStray waits for the next message c received outside its requests.
func (c *client) nextStray() *paho.Publish {
	c.t.Helper()
	return receive(c, c.stray, "message")
}

// connectCode sends an MQTT 5 CONNECT and returns the CONNACK reason code;
// the connection is closed when the test ends.
func connectCode(t *testing.T, b *broker.Broker, id, user, pw string, edit func(*packets.Connect)) (byte, net.Conn) {
	t.Helper()
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	cp := packets.NewControlPacket(packets.CONNECT)
	cn := cp.Content.(*packets.Connect)
	cn.ClientID, cn.CleanStart, cn.KeepAlive, cn.ProtocolName, cn.ProtocolVersion = id, true, 30, "MQTT", 5
	if user != "" {
		cn.Username, cn.UsernameFlag, cn.Password, cn.PasswordFlag = user, true, []byte(pw), true
	}
	if edit != nil {
		edit(cn)
	}
	if _, err := cp.WriteTo(nc); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	ack, err := packets.ReadPacket(nc)
	if err != nil {
		t.Fatalf("reading CONNACK: %v", err)
	}
	_ = nc.SetReadDeadline(time.Time{})
	return ack.Content.(*packets.Connack).ReasonCode, nc
}

// mqtt3 encodes MQTT 3.1.1 packets, which paho (MQTT 5 only) cannot.
type mqtt3 struct{}

func (mqtt3) str(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

func (mqtt3) packet(header byte, body []byte) []byte {
	out := []byte{header}
	n := len(body)
	for {
		b := byte(n % 128)
		n /= 128
		if n > 0 {
			b |= 0x80
		}
		out = append(out, b)
		if n == 0 {
			break
		}
	}
	return append(out, body...)
}

// connectCode3 sends an MQTT 3.1.1 CONNECT and returns the CONNACK return
// code; the connection is closed when the test ends.
func connectCode3(t *testing.T, b *broker.Broker, id, user, pw string) (byte, net.Conn) {
	t.Helper()
	var m mqtt3
	nc, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nc.Close() })
	body := append(m.str("MQTT"), 4, 0xC2, 0, 30) // level 4; user name, password, clean session; keep-alive 30 s
	body = append(append(append(body, m.str(id)...), m.str(user)...), m.str(pw)...)
	if _, err := nc.Write(m.packet(0x10, body)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	ack := make([]byte, 4)
	if _, err := io.ReadFull(nc, ack); err != nil {
		t.Fatalf("reading MQTT 3.1.1 CONNACK: %v", err)
	}
	if ack[0] != 0x20 {
		t.Fatalf("MQTT 3.1.1 CONNECT answered with % x", ack)
	}
	return ack[3], nc
}

func notifyPayload(value string) []byte {
	return []byte("*4\r\n$6\r\nNOTIFY\r\n$3\r\nSET\r\n$5\r\nVALUE\r\n$" + strconv.Itoa(len(value)) + "\r\n" + value + "\r\n")
}

// recordLog keeps every log record as text, attributes included.
type recordLog struct {
	mu      sync.Mutex
	records []string
}

func (l *recordLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *recordLog) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Level.String() + " " + r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.String())
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, b.String())
	return nil
}
func (l *recordLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *recordLog) WithGroup(string) slog.Handler      { return l }

// matching returns the records containing sub.
func (l *recordLog) matching(sub string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, r := range l.records {
		if strings.Contains(r, sub) {
			out = append(out, r)
		}
	}
	return out
}

func withRecordLog(l *recordLog) func(*broker.Config) {
	return func(cfg *broker.Config) { cfg.Logger = slog.New(l) }
}

// Attack 1: bob subscribes to everything, or to alice's topics, to read her
// responses (values included). Each SUBSCRIBE is refused with 0x87 and bob
// never receives alice's traffic. (Before: every subscription was granted
// and bob received alice's GET reply with her value.)
func TestACLOtherClientsTopicsCannotBeSubscribed(t *testing.T) {
	b, _ := authBroker(t, "")
	a := dial(t, b, alice, withID("alice-app"), withNotifySub(1))
	spy := dial(t, b, bob)
	for _, filter := range []string{
		"#",
		"clients/#",
		"clients/+/statestore/#",
		a.respTopic,
		"$share/g/" + a.respTopic,
		wire.NotifyFilter(a.id),
		"clients/statestore/#",
		"$SYS/#",
	} {
		if rc := spy.subscribeCode(filter); rc != rcNotAuthorized {
			t.Errorf("bob's SUBSCRIBE %q: reason 0x%02x, want 0x87", filter, rc)
		}
	}
	// A client id that spells alice's id in hex does not get her Go SDK
	// topics as its own raw-id topics.
	hexSpy := dial(t, b, bob, withID(wire.Hex([]byte(a.id))))
	if rc := hexSpy.subscribeCode("clients/" + hexSpy.id + "/#"); rc != rcNotAuthorized {
		t.Errorf("SUBSCRIBE by a client whose id is alice's hex: reason 0x%02x, want 0x87", rc)
	}

	a.keyNotify("secret")
	a.set("secret", "alice's value")
	expectPayload(t, a.call("GET", "secret"), bulk("alice's value"))
	a.expectNotes("secret SET alice's value")
	spy.noStrays()
	hexSpy.noStrays()
}

// Attack 2: bob publishes a forged NOTIFY into alice's notification topic
// (her client would deliver it as a real change), or a forged response into
// her response topic, or leaves one as his will. MQTT 5: PUBACK 0x87; MQTT
// 3.1.1: disconnected; a will there: CONNACK 0x87. Alice sees nothing.
// (Before: PUBACK success and alice's client received the forged NOTIFY.)
func TestACLForgedNotificationIsRefused(t *testing.T) {
	b, _ := authBroker(t, "")
	a := dial(t, b, alice, withID("alice-app"), withNotifySub(1)) // Rust SDK style: subscribed to its notify filter
	a.keyNotify("door")
	forger := dial(t, b, bob)

	forged := &paho.Publish{Topic: wire.NotifyTopic(a.id, []byte("door")), Payload: notifyPayload("open")}
	forged.Properties = &paho.PublishProperties{}
	forged.Properties.User.Add(wire.PropTimestamp, "001732000000000:00001:StateStore")
	if rc := forger.publishCode(forged); rc != rcNotAuthorized {
		t.Errorf("forged NOTIFY: PUBACK 0x%02x, want 0x87", rc)
	}
	fakeResp := &paho.Publish{Topic: a.respTopic, Payload: []byte("+OK\r\n"), Properties: &paho.PublishProperties{CorrelationData: newCorr()}}
	if rc := forger.publishCode(fakeResp); rc != rcNotAuthorized {
		t.Errorf("forged response: PUBACK 0x%02x, want 0x87", rc)
	}

	// MQTT 3.1.1 has no PUBACK reason codes: the forger is disconnected.
	rc, nc := connectCode3(t, b, "bob-v3", "bob", "bob-pw")
	if rc != 0 {
		t.Fatalf("bob's MQTT 3.1.1 connection refused: 0x%02x", rc)
	}
	var m mqtt3
	body := append(append(m.str(wire.NotifyTopic(a.id, []byte("door"))), 0, 1), notifyPayload("open")...) // packet id 1
	if _, err := nc.Write(m.packet(0x32, body)); err != nil {                                             // PUBLISH QoS 1
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(wait))
	// mochi writes a DISCONNECT first (e0 00), though MQTT 3.1.1 has none
	// from the server; what matters is no PUBACK (40 02 00 01).
	if got, err := io.ReadAll(nc); err != nil && !isClosed(err) || len(got) > 0 && string(got) != "\xe0\x00" {
		t.Fatalf("MQTT 3.1.1 forger got % x (%v), want the connection closed without a PUBACK", got, err)
	}

	// A will is a publish too.
	rc, _ = connectCode(t, b, "bob-will", "bob", "bob-pw", func(c *packets.Connect) {
		c.WillFlag, c.WillQOS, c.WillTopic, c.WillMessage = true, 1, wire.NotifyTopic(a.id, []byte("door")), notifyPayload("open")
		c.WillProperties = &packets.Properties{}
	})
	if rc != rcNotAuthorized {
		t.Errorf("CONNECT with a will into alice's notification topic: CONNACK 0x%02x, want 0x87", rc)
	}

	a.expectNotes() // nothing forged arrived (a real change would have)
	a.noStrays()
	a.set("door", "closed")
	a.expectNotes("door SET closed")
}

// Attack 3: bob connects with alice's client id to take her session over.
// CONNACK 0x85 while her session lives; alice stays connected and working.
// Alice herself may reconnect with it (a normal takeover), and once her
// session ends bob may use the id. (Before: bob was accepted and alice
// disconnected with "session taken over".)
func TestACLClientIDTakeoverByAnotherUserIsRefused(t *testing.T) {
	b, _ := authBroker(t, "")
	const id = "thermostat-7"
	a := dial(t, b, alice, withID(id))
	a.set("k", "v")

	if rc, _ := connectCode(t, b, id, "bob", "bob-pw", nil); rc != rcClientIDNotValid {
		t.Errorf("bob with alice's live client id: CONNACK 0x%02x, want 0x85", rc)
	}
	if rc, _ := connectCode3(t, b, id, "bob", "bob-pw"); rc != 5 {
		t.Errorf("bob (MQTT 3.1.1) with alice's live client id: CONNACK 0x%02x, want 5 (not authorized)", rc)
	}
	select {
	case <-a.pc.Done():
		t.Fatal("alice was disconnected by bob's attempts")
	default:
	}
	expectPayload(t, a.call("GET", "k"), bulk("v"))

	// Same user: an ordinary takeover (reconnect).
	a2 := dial(t, b, alice, withID(id))
	select {
	case <-a.pc.Done():
	case <-time.After(wait):
		t.Fatal("alice's old connection not taken over by her new one")
	}
	expectPayload(t, a2.call("GET", "k"), bulk("v"))

	// Once alice's session has ended, the id is free.
	a2.close()
	<-a2.pc.Done()
	testutil.WaitFor(t, "bob to get the released client id", func() bool {
		rc, nc := connectCode(t, b, id, "bob", "bob-pw", nil)
		_ = nc.Close()
		return rc == 0
	})

	// A session that outlives its connection (session expiry) keeps the id.
	expiry := uint32(3600)
	rc, nc := connectCode(t, b, "persistent-7", "alice", "alice-pw", func(c *packets.Connect) {
		c.Properties = &packets.Properties{SessionExpiryInterval: &expiry}
	})
	if rc != 0 {
		t.Fatalf("alice with a persistent session: CONNACK 0x%02x", rc)
	}
	_ = nc.Close()
	if rc, _ := connectCode(t, b, "persistent-7", "bob", "bob-pw", nil); rc != rcClientIDNotValid {
		t.Errorf("bob with the id of alice's disconnected but live session: CONNACK 0x%02x, want 0x85", rc)
	}
	if rc, _ := connectCode(t, b, "persistent-7", "alice", "alice-pw", nil); rc != 0 {
		t.Errorf("alice resuming her own id: CONNACK 0x%02x", rc)
	}
}

// Attack 4: bob sends a request whose response topic is alice's, to plant a
// reply (with a guessed correlation id: a forged one) in her client. PUBACK
// 0x87, not executed, nothing reaches alice. (Before: executed, PUBACK
// success, and the reply went to alice's topic.)
func TestACLRequestCannotAimItsResponseAtAnotherClient(t *testing.T) {
	b, _ := authBroker(t, "")
	a := dial(t, b, alice, withID("alice-app"))
	attacker := dial(t, b, bob)
	p := attacker.request(resp.EncodeRequest([]byte("SET"), []byte("planted"), []byte("x")))
	p.Properties.ResponseTopic = a.respTopic
	if rc := attacker.publishCode(p); rc != rcNotAuthorized {
		t.Fatalf("request with alice's response topic: PUBACK 0x%02x, want 0x87", rc)
	}
	expectPayload(t, a.call("GET", "planted"), "$-1\r\n") // not executed
	a.noStrays()
	// The attacker's own response topic still works.
	attacker.set("mine", "x")
}

// keysACL gives alice the keys alice/*, bob bob/* and read access to
// shared/*; both may use barrier-* (the test client's barrier) and
// round-trip.
const keysACL = `
authorizationPolicies:
  rules:
    - principals: {usernames: [alice, bob]}
      brokerResources: [{method: Connect}]
      stateStoreResources:
        - {method: ReadWrite, keyType: Pattern, keys: ["{principal.username}/*", "barrier-*", round-trip]}
        - {method: Read, keyType: String, keys: [shared/config]}
`

// Attack 5: with an ACL file, bob touches a key outside his
// stateStoreResources. Every command gets -ERR not authorized and nothing
// changes; KEYNOTIFY STOP (his own registration) is allowed. (Before: there
// was no ACL; every command ran.)
func TestACLKeyOutsideGrantsIsNotAuthorized(t *testing.T) {
	b, _ := authBroker(t, keysACL)
	a := dial(t, b, alice)
	a.set("alice/secret", "v1")
	expectPayload(t, a.call("SET", "shared/config", "c"), errText(wire.ErrTextNotAuthorized)) // alice may only read it
	bb := dial(t, b, bob)
	for _, args := range [][]string{
		{"GET", "alice/secret"},
		{"SET", "alice/secret", "mine"},
		{"SET", "alice/secret", "mine", "NX", "PX", "1000"},
		{"DEL", "alice/secret"},
		{"VDEL", "alice/secret", "v1"},
		{"KEYNOTIFY", "alice/secret"},
		{"SET", "shared/config", "x"}, // read only
		{"DEL", "shared/config"},
		{"get", "alice/secret"},
	} {
		if r := bb.call(args...); string(r.payload) != errText(wire.ErrTextNotAuthorized) || r.hasTS {
			t.Errorf("bob %q: %s, want -ERR not authorized without __ts", args, r)
		}
	}
	// Authorization comes after option parsing (§9 step 7): a malformed
	// request is still a syntax error.
	expectPayload(t, bb.call("SET", "alice/secret", "x", "BOGUS"), errText(wire.ErrTextSyntax))
	expectPayload(t, bb.call("KEYNOTIFY", "alice/secret", "STOP"), ":0\r\n")
	expectPayload(t, bb.call("GET", "shared/config"), "$-1\r\n")
	bb.keyNotify("shared/config")
	bb.set("bob/x", "y")
	expectPayload(t, a.call("GET", "alice/secret"), bulk("v1"))
	if b.Stats().Registrations != 1 {
		t.Fatalf("%d registrations, want bob's one on shared/config", b.Stats().Registrations)
	}
}

// reloadFile rewrites the ACL or password file and waits until the broker
// logged the outcome (want: "ACL file reloaded", "password file not
// reloaded"...).
func reloadFile(t *testing.T, logs *recordLog, file, content, want string) {
	t.Helper()
	before := len(logs.matching(want))
	tmp := file + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil { // atomically, as editors and ConfigMaps do
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the broker to log "+want, func() bool { return len(logs.matching(want)) > before })
}

const reloadBefore = `
authorizationPolicies:
  rules:
    - principals: {usernames: [alice]}
      brokerResources:
        - {method: Connect}
        - {method: Publish, topics: ["feed/#", "news/#"]}
      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: ["*"]}]
    - principals: {usernames: [bob]}
      brokerResources:
        - {method: Connect}
        - {method: Subscribe, topics: ["feed/#"]}
      stateStoreResources:
        - {method: Read, keyType: Pattern, keys: ["k/*"]}
        - {method: ReadWrite, keyType: Pattern, keys: ["barrier-*", round-trip]}
`

// The grants of reloadBefore for bob, moved: feed/# and k/* revoked,
// news/# and j/* granted.
var reloadAfter = strings.NewReplacer(`["feed/#"]`, `["news/#"]`, `["k/*"]`, `["j/*"]`).Replace(reloadBefore)

// A grant added to or removed from the ACL file takes effect without
// dropping connections: bob's new requests, subscriptions, deliveries on
// subscriptions made earlier and notifications of keys registered earlier
// all follow the file. A file that does not load keeps the ACL in force.
// (Before: no ACL file, no reload.)
func TestACLReloadTakesEffectWithoutDroppingConnections(t *testing.T) {
	logs := &recordLog{}
	b, file := authBroker(t, reloadBefore, withRecordLog(logs))
	a := dial(t, b, alice)
	bb := dial(t, b, bob)
	if rc := bb.subscribeCode("feed/#"); rc != 1 {
		t.Fatalf("SUBSCRIBE feed/#: 0x%02x", rc)
	}
	if rc := bb.subscribeCode("news/#"); rc != rcNotAuthorized {
		t.Fatalf("SUBSCRIBE news/# before it is granted: 0x%02x", rc)
	}
	bb.keyNotify("k/1")
	expectPayload(t, bb.call("GET", "j/1"), errText(wire.ErrTextNotAuthorized))
	a.set("k/1", "one")
	bb.expectNotes("k/1 SET one")
	a.publishCode(&paho.Publish{Topic: "feed/a", Payload: []byte("1")})
	if p := bb.nextStray(); p.Topic != "feed/a" {
		t.Fatalf("bob got %q, want feed/a", p.Topic)
	}

	reloadFile(t, logs, file, reloadAfter, "ACL file reloaded")
	expectPayload(t, bb.call("GET", "k/1"), errText(wire.ErrTextNotAuthorized))
	expectPayload(t, bb.call("GET", "j/1"), "$-1\r\n")
	if rc := bb.subscribeCode("feed/#"); rc != rcNotAuthorized {
		t.Errorf("SUBSCRIBE feed/# after it was revoked: 0x%02x", rc)
	}
	if rc := bb.subscribeCode("news/#"); rc != 1 {
		t.Errorf("SUBSCRIBE news/# after it was granted: 0x%02x", rc)
	}
	// Revoked: deliveries on the subscription made before, and
	// notifications of the key registered before.
	a.set("k/1", "two")
	bb.expectNotes()
	a.publishCode(&paho.Publish{Topic: "feed/b", Payload: []byte("2")})
	a.publishCode(&paho.Publish{Topic: "news/c", Payload: []byte("3")}) // delivered in order after feed/b
	if p := bb.nextStray(); p.Topic != "news/c" {
		t.Fatalf("bob got %q after the reload revoked feed/#, want only news/c", p.Topic)
	}

	// A broken file is refused with file:line, and the ACL stays.
	reloadFile(t, logs, file, strings.Replace(reloadAfter, "{method: Connect}\n        - {method: Subscribe", "{method: Connect}\n        - {method: Bogus}\n        - {method: Subscribe", 1), "ACL file not reloaded")
	if got := logs.matching("ACL file not reloaded"); !strings.Contains(got[0], file+":12: authorizationPolicies.rules[1].brokerResources[1].method") {
		t.Errorf("reload error does not name file:line: field: %q", got)
	}
	expectPayload(t, bb.call("GET", "j/1"), "$-1\r\n")

	// Back to the first version: grants return.
	reloadFile(t, logs, file, reloadBefore, "ACL file reloaded")
	expectPayload(t, bb.call("GET", "k/1"), bulk("two"))
	for _, c := range []*client{a, bb} {
		select {
		case <-c.pc.Done():
			t.Fatalf("client %s was disconnected by a reload", c.id)
		default:
		}
	}
}

// A ConfigMap-style update (the file is a symlink through ..data, swapped
// atomically) is picked up.
func TestACLReloadFollowsConfigMapSwap(t *testing.T) {
	dir := t.TempDir()
	write := func(version, content string) {
		d := filepath.Join(dir, version)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "acl.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(version, tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write("..v1", reloadBefore)
	if err := os.Symlink("..data/acl.yaml", filepath.Join(dir, "acl.yaml")); err != nil {
		t.Fatal(err)
	}
	logs := &recordLog{}
	b, _ := authBroker(t, "", withRecordLog(logs), func(c *broker.Config) { c.ACLFile = filepath.Join(dir, "acl.yaml") })
	bb := dial(t, b, bob)
	expectPayload(t, bb.call("GET", "j/1"), errText(wire.ErrTextNotAuthorized))
	write("..v2", reloadAfter)
	testutil.WaitFor(t, "the swapped ConfigMap to be loaded", func() bool { return len(logs.matching("ACL file reloaded")) > 0 })
	expectPayload(t, bb.call("GET", "j/1"), "$-1\r\n")
}

// The official SDKs' topic shapes work under the default policy (password
// file, no ACL file): the Go SDK's hex response topic with notifications
// delivered into its session, the Rust SDK's raw-id response topic with its
// hex notify filter, and the .NET SDK's raw-id topics (its notify filter is
// granted, though it never matches).
func TestACLDefaultPolicyServesTheSDKShapes(t *testing.T) {
	b, _ := authBroker(t, "")
	goSDK := dial(t, b, alice, withID("go-client"))
	rustSDK := dial(t, b, alice, withID("rust-client"), withNotifySub(1), withResponseTopic(func(id string) string {
		return "clients/" + id + "/services/" + wire.RequestTopic + "/response"
	}))
	netSDK := dial(t, b, bob, withID("dotnet-client"), withResponseTopic(func(id string) string {
		return "clients/" + id + "/" + wire.RequestTopic
	}))
	if rc := netSDK.subscribeCode("clients/statestore/v1/" + wire.ServiceGUID + "/dotnet-client/command/notify"); rc != 1 {
		t.Fatalf(".NET SDK's notify subscription: 0x%02x", rc)
	}
	for _, c := range []*client{goSDK, rustSDK, netSDK} {
		c.keyNotify("lock1")
	}
	set := goSDK.call("SET", "lock1", "go-client", "NEX", "PX", "10000")
	expectPayload(t, set, "+OK\r\n")
	for _, c := range []*client{goSDK, rustSDK, netSDK} {
		if n := c.nextNote(); string(n.key) != "lock1" || n.op != resp.OpSet || string(n.value) != "go-client" || n.ts != set.ts {
			t.Fatalf("client %s: notification %+v", c.id, n)
		}
		r := c.call("GET", "lock1")
		expectPayload(t, r, bulk("go-client"))
		if r.ts != set.ts {
			t.Fatalf("client %s: GET __ts %q, want %q", c.id, r.ts, set.ts)
		}
	}
	expectPayload(t, netSDK.call("VDEL", "lock1", "go-client"), ":1\r\n")
	for _, c := range []*client{goSDK, rustSDK, netSDK} {
		if n := c.nextNote(); n.op != resp.OpDelete {
			t.Fatalf("client %s: notification %+v, want DELETE", c.id, n)
		}
	}
}

// Authorization is off without credentials and without an ACL: everything
// is allowed, as before. Authorize turns the default policy on for an open
// loopback broker, and an ACL file applies without a password file, with
// user names as claimed.
func TestACLModes(t *testing.T) {
	open := brokertest.Start(t)
	if rc := dial(t, open).subscribeCode("#"); rc != 1 {
		t.Fatalf("open broker: SUBSCRIBE #: 0x%02x", rc)
	}
	strict := brokertest.Start(t, func(c *broker.Config) { c.Authorize = true })
	if rc := dial(t, strict).subscribeCode("#"); rc != rcNotAuthorized {
		t.Fatalf("Authorize: SUBSCRIBE #: 0x%02x", rc)
	}
	file := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(file, []byte(keysACL), 0o600); err != nil {
		t.Fatal(err)
	}
	claimed := brokertest.Start(t, func(c *broker.Config) { c.ACLFile = file })
	c := dial(t, claimed, withCredentials("bob", "anything"))
	c.set("bob/x", "1")
	expectPayload(t, c.call("SET", "alice/x", "1"), errText(wire.ErrTextNotAuthorized))
	if _, err := tryDial(t, claimed.Addr(), withCredentials("mallory", "x")); err == nil {
		t.Fatal("a user without a Connect grant connected")
	}
	// Bad passwords are still told apart from authorization.
	b, _ := authBroker(t, keysACL)
	if rc, _ := connectCode(t, b, "x", "bob", "wrong", nil); rc != rcBadPassword {
		t.Fatalf("wrong password: CONNACK 0x%02x, want 0x86", rc)
	}
	if rc, _ := connectCode(t, b, "x", "", "", nil); rc != rcBadPassword {
		t.Fatalf("no credentials: CONNACK 0x%02x, want 0x86", rc)
	}
}

// A bad ACL file stops New with file, line and field.
func TestACLFileErrorStopsNew(t *testing.T) {
	file := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(file, []byte("authorizationPolicies:\n  rules:\n    - principals: {usernames: [a]}\n      brokerResources: [{method: Pub}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := broker.New(broker.Config{Listen: "127.0.0.1:0", ACLFile: file})
	if !errors.Is(err, broker.ErrConfig) || !errors.Is(err, broker.ErrACLFile) ||
		!strings.Contains(err.Error(), file+":4: authorizationPolicies.rules[0].brokerResources[0].method") {
		t.Fatalf("New: %v", err)
	}
}
