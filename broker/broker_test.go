package broker_test

// Library traps (libraries.md §3, §4), access control, TLS, bad input,
// slow clients and shutdown.

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"go.uber.org/goleak"
	"golang.org/x/crypto/bcrypt"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
	"github.com/ssrun/ssrun/protocol/resp"
	"github.com/ssrun/ssrun/protocol/wire"
)

// autopaho sends Request Problem Information = 0 whenever it sets a session
// expiry; mochi then strips user properties from every packet unless the
// broker's OnPacketEncode fix restores them on PUBLISH.
func TestUserPropertiesSurviveRequestProblemInfoOff(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b, withProblemInfoOff(60))
	c.keyNotify("k")
	r := c.call("SET", "k", "v") // call fails unless __stat is 200
	if !r.hasTS {
		t.Fatal("__ts stripped from the response")
	}
	if n := c.nextNote(); n.ts == "" {
		t.Fatal("__ts stripped from the notification")
	}
}

// Capabilities.Compatibilities.NoInheritedPropertiesOnAck: a PUBACK must not
// echo the request's user properties.
func TestPubackCarriesNoUserProperties(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	p := c.request(resp.EncodeRequest([]byte("SET"), []byte("k"), []byte("v")))
	p.Properties.User.Add("custom", "x")
	ctx, cancel := contextWait()
	defer cancel()
	_, pr, err := c.exchange(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if pr.ReasonCode != 0 {
		t.Fatalf("PUBACK reason 0x%x", pr.ReasonCode)
	}
	if pr.Properties != nil && len(pr.Properties.User) != 0 {
		t.Fatalf("PUBACK carries user properties %v", pr.Properties.User)
	}
}

func TestConnackAnnouncesMaxPacketSize(t *testing.T) {
	b := brokertest.Start(t)
	raw, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	cp := packets.NewControlPacket(packets.CONNECT)
	cn := cp.Content.(*packets.Connect)
	cn.ClientID, cn.CleanStart, cn.KeepAlive, cn.ProtocolName, cn.ProtocolVersion = "mps", true, 30, "MQTT", 5
	if _, err := cp.WriteTo(raw); err != nil {
		t.Fatal(err)
	}
	_ = raw.SetReadDeadline(time.Now().Add(wait))
	ack, err := packets.ReadPacket(raw)
	if err != nil {
		t.Fatal(err)
	}
	ca := ack.Content.(*packets.Connack)
	if ca.Properties == nil || ca.Properties.MaximumPacketSize == nil || *ca.Properties.MaximumPacketSize != broker.MaxPacketSize {
		t.Fatalf("CONNACK maximum packet size %+v, want %d", ca.Properties, broker.MaxPacketSize)
	}
}

func TestMochiLogsAreOneLevelQuieter(t *testing.T) {
	logs := &logCapture{}
	brokertest.Start(t, withLogs(logs))
	if !logs.has("DEBUG mochi mqtt starting") || logs.has("INFO mochi mqtt starting") {
		t.Fatalf("mochi's INFO start message not logged at DEBUG: %q", logs.msgs)
	}
}

func TestNewConfig(t *testing.T) {
	dir := t.TempDir()
	hash := cheapHash(t, "secret")
	pwFile := filepath.Join(dir, "passwords")
	if err := os.WriteFile(pwFile, []byte("alice:"+hash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		cfg  broker.Config
		ok   bool
		want string
	}{
		{"zero value", broker.Config{}, true, ""},
		{"localhost", broker.Config{Listen: "localhost:0"}, true, ""},
		{"IPv6 loopback", broker.Config{Listen: "[::1]:0"}, true, ""},
		{"127.0.0.2", broker.Config{Listen: "127.0.0.2:0"}, true, ""},
		{"all interfaces", broker.Config{Listen: ":1883"}, false, "not loopback"},
		{"0.0.0.0", broker.Config{Listen: "0.0.0.0:1883"}, false, "not loopback"},
		{"0.0.0.0 insecure", broker.Config{Listen: "0.0.0.0:1883", Insecure: true}, true, ""},
		{"0.0.0.0 with passwords", broker.Config{Listen: "0.0.0.0:1883", PasswordFile: pwFile}, true, ""},
		{"pre-bound public listener", broker.Config{Listener: stubListener{&net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1883}}}, false, "not loopback"},
		{"bad address", broker.Config{Listen: "nonsense"}, false, "listen address"},
		{"bad port", broker.Config{Listen: "127.0.0.1:http-nope"}, false, "bad port"},
		{"missing password file", broker.Config{PasswordFile: filepath.Join(dir, "nope")}, false, "nope"},
		{"cert without key", broker.Config{TLSCertFile: "cert.pem"}, false, "both"},
		{"unreadable key pair", broker.Config{TLSCertFile: filepath.Join(dir, "c"), TLSKeyFile: filepath.Join(dir, "k")}, false, "TLS key pair"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := broker.New(tc.cfg)
			if tc.ok {
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Close(); err != nil { // never started: nothing to stop
					t.Fatal(err)
				}
				return
			}
			if err == nil || !errors.Is(err, broker.ErrConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrConfig mentioning %q", err, tc.want)
			}
		})
	}
}

type stubListener struct{ addr net.Addr }

func (l stubListener) Accept() (net.Conn, error) { return nil, net.ErrClosed }
func (l stubListener) Close() error              { return nil }
func (l stubListener) Addr() net.Addr            { return l.addr }

// cheapHash is a minimum-cost bcrypt hash: the tests run under -race.
func cheapHash(t testing.TB, pw string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(pw), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	return string(h)
}

func TestHashPassword(t *testing.T) {
	hash, err := broker.HashPassword([]byte("s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	if bcrypt.CompareHashAndPassword([]byte(hash), []byte("s3cret")) != nil {
		t.Fatal("hash does not verify")
	}
	if _, err := broker.HashPassword(nil); err == nil {
		t.Fatal("empty password hashed")
	}
}

func TestPasswordFileAuthentication(t *testing.T) {
	hash := cheapHash(t, "s3cret")
	pwFile := filepath.Join(t.TempDir(), "passwords")
	if err := os.WriteFile(pwFile, []byte("# users\n\nalice:"+hash+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b := brokertest.Start(t, func(c *broker.Config) { c.PasswordFile = pwFile })
	c := dial(t, b, withCredentials("alice", "s3cret"))
	c.set("k", "v")
	for _, tc := range []struct{ name, user, pw string }{
		{"wrong password", "alice", "nope"},
		{"unknown user", "mallory", "s3cret"},
		{"no credentials", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opts []clientOpt
			if tc.user != "" {
				opts = append(opts, withCredentials(tc.user, tc.pw))
			}
			if _, err := tryDial(t, b.Addr(), opts...); err == nil {
				t.Fatal("connected")
			}
		})
	}
}

func TestTLSListener(t *testing.T) {
	certFile, keyFile, pool := testutil.SelfSignedCert(t)
	b := brokertest.Start(t, func(c *broker.Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile })
	dialTLS := func(addr string) (net.Conn, error) {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS12})
		if err != nil {
			return nil, err
		}
		return packets.NewThreadSafeConn(conn), nil
	}
	c, err := tryDial(t, b.Addr(), func(cc *clientConfig) { cc.dialer = dialTLS })
	if err != nil {
		t.Fatal(err)
	}
	c.set("k", "v")
	expectPayload(t, c.call("GET", "k"), bulk("v"))
	if _, err := tryDial(t, b.Addr()); err == nil { // plain TCP is not served
		t.Fatal("plain MQTT connected to a TLS listener")
	}
}

// Bad input of every kind gets its error and leaves stored data unchanged.
func TestBadInputLeavesDataIntact(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	lock := c.call("SET", "lock", "me")
	set := c.do(lock.ts, "SET", "k", "v")
	for i, tc := range []struct {
		payload []byte
		want    string
	}{
		{nil, wire.ErrTextSyntax},
		{[]byte("*"), wire.ErrTextSyntax},
		{[]byte("*2\r\n$3\r\nDEL\r\n$1\r\nk"), wire.ErrTextSyntax},
		{[]byte("*2\r\n$3\r\nDEL\r\n$99999999999\r\nk\r\n"), wire.ErrTextSyntax},
		{[]byte("*99999999\r\n$3\r\nDEL\r\n"), wire.ErrTextSyntax},
		{[]byte("*2\r\n*1\r\n$3\r\nDEL\r\n$1\r\nk\r\n"), wire.ErrTextSyntax},
		{[]byte("+OK\r\n"), wire.ErrTextSyntax},
		{[]byte(strings.Repeat("\x00\xff", 1000)), wire.ErrTextSyntax},
		{resp.EncodeRequest([]byte(strings.Repeat("DEL", 10_000)), []byte("k")), wire.ErrTextUnknownCommand},
	} {
		t.Run(fmt.Sprintf("payload %d", i), func(t *testing.T) {
			expectPayload(t, c.mustExchange(c.request(tc.payload)), errText(tc.want))
		})
	}
	for _, args := range [][]string{
		{"DEL", "k"}, {"VDEL", "k", "v"}, {"SET", "k", "x"}, // no token
		{"DEL", "k", "extra"}, {"SET", "k", "x", "PX", "nope"}, {"KEYNOTIFY", "k", "NOPE"},
	} {
		r := c.call(args...)
		if r.reply.Kind != resp.KindError {
			t.Fatalf("%q: %q, want an error", args, r.payload)
		}
	}
	for _, ft := range []string{"garbage", "1:2", "99999999999999:0:x"} {
		if r := c.do(ft, "DEL", "k"); r.reply.Kind != resp.KindError {
			t.Fatalf("DEL with __ft %q: %q", ft, r.payload)
		}
	}
	get := c.call("GET", "k")
	expectPayload(t, get, bulk("v"))
	if get.ts != set.ts {
		t.Fatalf("version changed from %s to %s", set.ts, get.ts)
	}
	if b.Keys() != 2 {
		t.Fatalf("%d keys, want 2", b.Keys())
	}
}

// A packet over MaxPacketSize costs its sender the connection, nothing else.
func TestOversizedRequestDisconnectsOnlyItsSender(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	c.set("k", "v")
	huge := dial(t, b)
	p := huge.request(resp.EncodeRequest([]byte("SET"), []byte("k"), make([]byte, broker.MaxPacketSize)))
	ctx, cancel := contextWait()
	defer cancel()
	go func() { _, _ = huge.pc.Publish(ctx, p) }()
	select {
	case <-huge.pc.Done():
	case <-ctx.Done():
		t.Fatal("the sender of an oversized packet is still connected")
	}
	expectPayload(t, c.call("GET", "k"), bulk("v"))
}

func TestClientDisconnectingMidRequest(t *testing.T) {
	b := brokertest.Start(t)
	c := dial(t, b)
	// Half a PUBLISH, then the connection closes: nothing happens.
	half := dialRaw(t, b, "half")
	var buf strings.Builder
	cp := rawRequest(1, "raw/resp", newCorr(), "", false, "DEL", "k")
	c.call("SET", "k", "v")
	if _, err := cp.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if _, err := half.nc.Write([]byte(buf.String()[:buf.Len()/2])); err != nil {
		t.Fatal(err)
	}
	_ = half.nc.Close()
	// A whole request followed at once by a close is still executed.
	whole := dialRaw(t, b, "whole")
	whole.write(rawRequest(1, "raw/resp", newCorr(), "not-an-hlc", false, "SET", "other", "v"))
	whole.write(rawRequest(2, "raw/resp", newCorr(), "", false, "DEL", "k"))
	_ = whole.nc.Close()
	testutil.WaitFor(t, "the DEL sent before the close to run", func() bool {
		return string(c.call("GET", "k").payload) == "$-1\r\n"
	})
	expectPayload(t, c.call("GET", "other"), "$-1\r\n") // its SET had a bad __ts
	c.set("k", "again")
}

// A client that stops reading must not stall the store or other clients;
// its notifications are queued, then dropped and counted.
func TestSlowClientDoesNotStallOthers(t *testing.T) {
	b := brokertest.Start(t)
	stuck := dialRaw(t, b, "stuck")
	stuck.subscribe("stuck/resp")
	stuck.write(rawRequest(1, "stuck/resp", newCorr(), "", false, "KEYNOTIFY", "hot"))
	testutil.WaitFor(t, "the registration", func() bool { return b.Stats().Registrations == 1 })
	// stuck never reads again.
	writer := dial(t, b)
	watcher := dial(t, b)
	watcher.keyNotify("hot")
	value := strings.Repeat("x", 60_000)
	const sets = 300 // ~18 MB of notifications for stuck, far beyond socket buffers
	for i := range sets {
		expectPayload(t, writer.call("SET", "hot", fmt.Sprint(i, value)), "+OK\r\n")
	}
	for i := range sets {
		n := watcher.nextNote()
		if want := fmt.Sprint(i, value); string(n.value) != want {
			t.Fatalf("notification %d out of order", i)
		}
	}
	expectPayload(t, writer.call("GET", "other"), "$-1\r\n")

	// Close does not hang on the stuck connection either.
	closed := make(chan error, 1)
	go func() { closed <- b.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(wait):
		t.Fatal("Close hangs on a client that stopped reading")
	}
}

// Start/Close leaves no goroutine behind, even with a connection that never
// sent CONNECT and a registered client.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b, err := broker.New(broker.Config{Listener: ln, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err != nil {
		t.Fatal(err)
	}
	if err := b.Start(); err == nil {
		t.Fatal("second Start succeeded")
	}
	silent, err := net.Dial("tcp", b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	c, err := tryDial(t, b.Addr())
	if err != nil {
		t.Fatal(err)
	}
	c.keyNotify("k")
	expectPayload(t, c.call("SET", "k", "v", "PX", "60000"), "+OK\r\n")
	c.nextNote()
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-c.pc.Done():
	case <-time.After(wait):
		t.Fatal("client not disconnected by Close")
	}
	_ = silent.SetReadDeadline(time.Now().Add(wait))
	if _, err := silent.Read(make([]byte, 1)); err == nil {
		t.Fatal("half-open connection still open after Close")
	}
}
