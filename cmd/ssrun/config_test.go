package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/listeners"
	"github.com/mochi-mqtt/server/v2/packets"
	"github.com/spf13/pflag"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/protocol"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	p := writeFile(t, "ssrun.yaml", `
broker:
  hostname: aio-broker
  tcp_port: 18883
  use_tls: true
  sat_file: /var/run/secrets/tokens/mq-sat
defaults:
  timeout: 500ms
  memory: 32MiB
  max_value: 64KiB
  mailbox: 64
  mailbox_keys: 4096
  mode: latest
  grace: 2s
  log_lines: 50
  log_bytes: 8KiB
  max_timers: 7
rules:
  thermostat.lua:
    timeout: 2000
    concurrency: 4
    read: ["thermostat*/**"]
    write: ["hvac/**"]
    lock: []
`)
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.Broker.Hostname != "aio-broker" || *c.Broker.TCPPort != 18883 || !*c.Broker.UseTLS {
		t.Fatalf("broker: %+v", c.Broker)
	}
	d := c.Defaults.toHost()
	if d.Timeout != 500*time.Millisecond || d.MemoryBytes != 32<<20 || d.MaxValueBytes != 64<<10 || d.Mailbox != 64 || d.MailboxKeys != 4096 || d.Mode != "latest" || d.Read != nil ||
		d.Grace != 2*time.Second || d.LogLines != 50 || d.LogBytes != 8<<10 || d.MaxTimers != 7 {
		t.Fatalf("defaults: %+v", d)
	}
	r := c.hostRules()["thermostat.lua"]
	if r.Timeout != 2*time.Second || len(r.Read) != 1 || r.Write[0] != "hvac/**" || r.Concurrency != 4 {
		t.Fatalf("rule: %+v", r)
	}
	if r.Lock == nil || len(r.Lock) != 0 {
		t.Fatalf("an empty lock list must deny all (non-nil, empty), got %#v", r.Lock)
	}
	if r.Watch != nil {
		t.Fatalf("an absent watch list must allow all (nil), got %#v", r.Watch)
	}
	empty, err := loadConfig(writeFile(t, "empty.yaml", ""))
	if err != nil || len(empty.Rules) != 0 {
		t.Fatalf("empty config: %+v, %v", empty, err)
	}
}

func TestLoadConfigErrorsNameFileAndLine(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown field", "defaults:\n  timeot: 1s\n", "line 2"},
		{"bad duration", "defaults:\n  timeout: soon\n", `line 2: bad duration "soon"`},
		{"bad size", "rules:\n  a.lua:\n    memory: lots\n", `line 3: bad size "lots"`},
		{"duration past time.Duration", "defaults:\n  timeout: 18446744073710\n", `line 2: duration "18446744073710" is too long`},
		{"bad pattern", "rules:\n  a.lua:\n    read: [\"a/[\"]\n", `rules: a.lua: read: bad key pattern "a/["`},
		{"plugin without path", "plugins:\n  p: {sha256: ab}\n", "plugins: p: path is required"},
		{"unknown mode", "rules:\n  a.lua:\n    mode: parallel\n", `rules: a.lua: mode: "parallel" is not a choice: say "queued" (the default), "latest" or "restart"`},
		{"negative log budget", "rules:\n  a.lua:\n    log_lines: -1\n", "rules: a.lua: timeout, grace, memory, max_value, mailbox, mailbox_keys, log_lines, log_bytes, max_timers, rescan and max_watched_keys must not be negative"},
		{"not yaml", "rules: [\n", "ssrun.yaml"},
		// It was dropped unread, and the rule kept the default permissions.
		{"second document", "defaults:\n  timeout: 1s\n---\nrules:\n  a.lua:\n    write: []\n", "line 4: a second YAML document (after ---)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, "ssrun.yaml", tc.yaml)
			_, err := loadConfig(p)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("err = %v, want it to name %s and contain %q", err, p, tc.want)
			}
		})
	}
}

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// Sources stack: ssrun.yaml, then AIO_* variables, then flags.
func TestConnectionSettingsPrecedence(t *testing.T) {
	s := connSettings{Hostname: "from-file", ClientID: "file-id"}
	err := s.applyEnv(env(map[string]string{
		"AIO_BROKER_HOSTNAME": "from-env", "AIO_BROKER_TCP_PORT": "18883", "AIO_MQTT_USE_TLS": "false",
		"AIO_MQTT_KEEP_ALIVE": "30", "AIO_MQTT_SESSION_EXPIRY": "0", "AIO_MQTT_CLEAN_START": "true",
		"AIO_MQTT_USERNAME": "bob",
	}))
	if err != nil {
		t.Fatal(err)
	}
	var f connFlags
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	f.register(fs, "")
	if err := fs.Parse([]string{"--client-id", "flag-id"}); err != nil {
		t.Fatal(err)
	}
	if err := f.apply(fs, &s); err != nil {
		t.Fatal(err)
	}
	cfg, err := s.clientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Servers[0] != "mqtt://from-env:18883" || cfg.ClientID != "flag-id" || cfg.KeepAlive != 30 || cfg.SessionExpiry != 0 || !cfg.CleanStart || cfg.TLS != nil {
		t.Fatalf("config: %+v", cfg)
	}
	creds, err := cfg.Credentials()
	if err != nil || creds.Username != "bob" {
		t.Fatalf("credentials: %+v, %v", creds, err)
	}
	// --broker overrides the environment's host and port.
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	f = connFlags{}
	f.register(fs, "")
	fs.Parse([]string{"--broker", "10.0.0.5:1884"})
	f.apply(fs, &s)
	if cfg, _ := s.clientConfig(); cfg.Servers[0] != "mqtt://10.0.0.5:1884" {
		t.Fatalf("--broker: %v", cfg.Servers)
	}
}

// The AIO SDK defaults: TLS on port 8883, keep-alive 60 s, session expiry
// 3600 s; loopback defaults to plain 1883 for local development.
func TestConnectionDefaults(t *testing.T) {
	cfg, err := (&connSettings{Hostname: "aio-broker"}).clientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Servers[0] != "mqtts://aio-broker:8883" || cfg.TLS == nil || cfg.TLS.ServerName != "aio-broker" || cfg.KeepAlive != 60 || cfg.SessionExpiry != 3600 {
		t.Fatalf("%+v", cfg)
	}
	cfg, _ = (&connSettings{Hostname: "127.0.0.1"}).clientConfig()
	if cfg.Servers[0] != "mqtt://127.0.0.1:1883" || cfg.TLS != nil {
		t.Fatalf("loopback: %+v", cfg)
	}
}

func TestConnectionSettingsErrors(t *testing.T) {
	var s connSettings
	err := s.applyEnv(env(map[string]string{"AIO_BROKER_TCP_PORT": "http", "AIO_MQTT_USE_TLS": "maybe", "AIO_MQTT_KEEP_ALIVE": "-1"}))
	for _, want := range []string{"AIO_BROKER_TCP_PORT", "AIO_MQTT_USE_TLS", "AIO_MQTT_KEEP_ALIVE"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("err %v does not name %s", err, want)
		}
	}
	off := false
	for name, s := range map[string]connSettings{
		"no host":            {},
		"tls files, no tls":  {Hostname: "h", UseTLS: &off, CAFile: "ca.pem"},
		"cert without key":   {Hostname: "h", CertFile: "c.pem"},
		"missing CA":         {Hostname: "h", CAFile: filepath.Join(t.TempDir(), "nope.pem")},
		"missing passwords":  {Hostname: "127.0.0.1", PasswordFile: filepath.Join(t.TempDir(), "nope")},
		"CA file without CA": {Hostname: "h", CAFile: writeFile(t, "ca.pem", "not pem")},
	} {
		if _, err := s.clientConfig(); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// satServer is an MQTT broker that admits only K8S-SAT enhanced
// authentication with the current token and records re-authentications.
type satServer struct {
	mqtt.HookBase
	mu       sync.Mutex
	token    string
	connects []string
	reauths  []string
}

func (h *satServer) ID() string { return "sat" }
func (h *satServer) Provides(b byte) bool {
	return b == mqtt.OnConnectAuthenticate || b == mqtt.OnACLCheck || b == mqtt.OnAuthPacket
}
func (h *satServer) OnACLCheck(*mqtt.Client, string, bool) bool { return true }
func (h *satServer) OnConnectAuthenticate(cl *mqtt.Client, pk packets.Packet) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.connects = append(h.connects, pk.Properties.AuthenticationMethod+"="+string(pk.Properties.AuthenticationData))
	return pk.Properties.AuthenticationMethod == "K8S-SAT" && string(pk.Properties.AuthenticationData) == h.token
}
func (h *satServer) OnAuthPacket(cl *mqtt.Client, pk packets.Packet) (packets.Packet, error) {
	h.mu.Lock()
	h.reauths = append(h.reauths, pk.Properties.AuthenticationMethod+"="+string(pk.Properties.AuthenticationData))
	ok := string(pk.Properties.AuthenticationData) == h.token
	h.mu.Unlock()
	code := packets.CodeSuccess.Code
	if !ok {
		code = packets.ErrNotAuthorized.Code
	}
	return pk, cl.WritePacket(packets.Packet{
		FixedHeader: packets.FixedHeader{Type: packets.Auth},
		ReasonCode:  code,
		Properties:  packets.Properties{AuthenticationMethod: "K8S-SAT"},
	})
}

// A service account token is sent with every connection and, when the file
// is rotated, on the live connection as a re-authentication.
func TestSATAuthenticationFollowsTokenRotation(t *testing.T) {
	hook := &satServer{token: "token-1"}
	srv := mqtt.New(&mqtt.Options{InlineClient: false, Logger: slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))})
	if err := srv.AddHook(hook, nil); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.AddListener(listeners.NewNet("t", ln)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Serve(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	dir := t.TempDir()
	tokenFile := filepath.Join(dir, "token")
	os.WriteFile(tokenFile, []byte("token-1\n"), 0o600)
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	s := connSettings{Hostname: host, SATFile: tokenFile}
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var f connFlags
	f.register(fs, "")
	fs.Parse([]string{"--broker", host + ":" + port})
	f.apply(fs, &s)
	cfg, err := s.clientConfig()
	if err != nil {
		t.Fatal(err)
	}
	cfg.ClientID = "sat-client"
	cfg.Logger = slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	c, err := protocol.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The store is not there (plain mochi): only the connection matters, and
	// the client reports it up once subscribed.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := c.AwaitConnection(ctx); err != nil {
		t.Fatal(err)
	}
	a := &app{stderr: &bytes.Buffer{}, log: cfg.Logger}
	stop, err := a.watchToken(context.Background(), c, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	hook.mu.Lock()
	hook.token = "token-2"
	hook.mu.Unlock()
	os.WriteFile(tokenFile+".new", []byte("token-2\n"), 0o600)
	os.Rename(tokenFile+".new", tokenFile) // atomic swap, as kubelet does
	deadline := time.Now().Add(10 * time.Second)
	for {
		hook.mu.Lock()
		n := len(hook.reauths)
		hook.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no re-authentication after the token rotated")
		}
		time.Sleep(10 * time.Millisecond)
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if hook.connects[0] != "K8S-SAT=token-1" || hook.reauths[0] != "K8S-SAT=token-2" {
		t.Fatalf("connects %q, reauths %q", hook.connects, hook.reauths)
	}
}

// A client key protected by AIO_TLS_KEY_PASSWORD_FILE (legacy encrypted
// PEM) loads with its password and fails with a wrong one; an encrypted
// PKCS#8 key is refused with the command that converts it.
func TestEncryptedClientKey(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "client"}, NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certFile := writeFile(t, "cert.pem", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	blk, err := x509.EncryptPEMBlock(rand.Reader, "RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key), []byte("pa55"), x509.PEMCipherAES256) //nolint:staticcheck
	if err != nil {
		t.Fatal(err)
	}
	keyFile := writeFile(t, "key.pem", string(pem.EncodeToMemory(blk)))
	good := writeFile(t, "pw", "pa55\n")

	if _, err := loadKeyPair(certFile, keyFile, good); err != nil {
		t.Fatalf("encrypted key with its password: %v", err)
	}
	// A wrong password fails naming the key file, whether decryption notices
	// it or not: legacy PEM has no integrity check, so about one wrong
	// password in 256 decrypts "successfully" and the key then fails to
	// parse. Find such a password and check that path too.
	if _, err := loadKeyPair(certFile, keyFile, writeFile(t, "pw", "nope\n")); err == nil || !strings.Contains(err.Error(), keyFile) {
		t.Fatalf("wrong password: %v", err)
	}
	for i := 0; ; i++ {
		pw := fmt.Sprintf("wrong-%d", i)
		if _, err := x509.DecryptPEMBlock(blk, []byte(pw)); err != nil { //nolint:staticcheck
			continue
		}
		if _, err := loadKeyPair(certFile, keyFile, writeFile(t, "pw", pw+"\n")); err == nil || !strings.Contains(err.Error(), keyFile) {
			t.Fatalf("wrong password %q that passes the padding check: %v", pw, err)
		}
		break
	}
	if _, err := loadKeyPair(certFile, keyFile, ""); err == nil {
		t.Fatal("an encrypted key loaded without a password")
	}
	pkcs8 := writeFile(t, "key8.pem", string(pem.EncodeToMemory(&pem.Block{Type: "ENCRYPTED PRIVATE KEY", Bytes: []byte{1, 2, 3}})))
	if _, err := loadKeyPair(certFile, pkcs8, good); err == nil || !strings.Contains(err.Error(), "openssl pkcs8") {
		t.Fatalf("encrypted PKCS#8: %v", err)
	}
	// Through the settings, as AIO_TLS_* would give them.
	s := connSettings{Hostname: "aio-broker", CertFile: certFile, KeyFile: keyFile, KeyPasswordFile: good}
	cfg, err := s.clientConfig()
	if err != nil || len(cfg.TLS.Certificates) != 1 {
		t.Fatalf("settings with an encrypted key: %v", err)
	}
}

// rescan and max_watched_keys reach the host: a duration, 0 for only when
// watched (host.RescanOff), absent for the default.
func TestConfigPatternSettings(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "ssrun.yaml")
	if err := os.WriteFile(p, []byte("defaults:\n  rescan: 30s\n  max_watched_keys: 50\nrules:\n  a.lua:\n    rescan: 0\n  b.lua:\n    max_watched_keys: 7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := loadConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	rules := c.hostRules()
	for _, tc := range []struct {
		file   string
		rescan time.Duration
		max    int
	}{{"a.lua", host.RescanOff, 50}, {"b.lua", 30 * time.Second, 7}, {"c.lua", 30 * time.Second, 50}} {
		rc := host.RuleConfigFor(c.Defaults.toHost(), rules, tc.file)
		if rc.Rescan != tc.rescan || rc.MaxWatchedKeys != tc.max {
			t.Errorf("%s: rescan %v, max_watched_keys %d; want %v, %d", tc.file, rc.Rescan, rc.MaxWatchedKeys, tc.rescan, tc.max)
		}
	}
	if rc := host.RuleConfigFor(host.RuleConfig{}, nil, "d.lua"); rc.Rescan != host.DefaultRescan || rc.MaxWatchedKeys != host.DefaultMaxWatchedKeys {
		t.Errorf("defaults: rescan %v, max_watched_keys %d", rc.Rescan, rc.MaxWatchedKeys)
	}
}
