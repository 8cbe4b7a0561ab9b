package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/ssrun/ssrun/protocol"
)

// connSettings are the MQTT connection settings, named after the variables
// the Azure IoT Operations SDKs read. Sources, later wins: ssrun.yaml
// `broker:`, AIO_* environment variables, command-line flags.
type connSettings struct {
	Hostname        string  `yaml:"hostname"`          // AIO_BROKER_HOSTNAME
	TCPPort         *uint16 `yaml:"tcp_port"`          // AIO_BROKER_TCP_PORT (default 8883 with TLS, 1883 without)
	UseTLS          *bool   `yaml:"use_tls"`           // AIO_MQTT_USE_TLS (default true, except on loopback)
	CAFile          string  `yaml:"ca_file"`           // AIO_TLS_CA_FILE
	CertFile        string  `yaml:"cert_file"`         // AIO_TLS_CERT_FILE
	KeyFile         string  `yaml:"key_file"`          // AIO_TLS_KEY_FILE
	KeyPasswordFile string  `yaml:"key_password_file"` // AIO_TLS_KEY_PASSWORD_FILE
	ClientID        string  `yaml:"client_id"`         // AIO_MQTT_CLIENT_ID
	CleanStart      *bool   `yaml:"clean_start"`       // AIO_MQTT_CLEAN_START (default false)
	KeepAlive       *uint16 `yaml:"keep_alive"`        // AIO_MQTT_KEEP_ALIVE seconds (default 60)
	SessionExpiry   *uint32 `yaml:"session_expiry"`    // AIO_MQTT_SESSION_EXPIRY seconds (default 3600)
	Username        string  `yaml:"username"`          // AIO_MQTT_USERNAME
	PasswordFile    string  `yaml:"password_file"`     // AIO_MQTT_PASSWORD_FILE
	SATFile         string  `yaml:"sat_file"`          // AIO_SAT_FILE (K8S-SAT enhanced authentication)
}

// applyEnv overlays the AIO_* variables found by lookup. Parse errors name
// the variable.
func (s *connSettings) applyEnv(lookup func(string) (string, bool)) error {
	str := func(name string, dst *string) {
		if v, ok := lookup(name); ok {
			*dst = v
		}
	}
	str("AIO_BROKER_HOSTNAME", &s.Hostname)
	str("AIO_TLS_CA_FILE", &s.CAFile)
	str("AIO_TLS_CERT_FILE", &s.CertFile)
	str("AIO_TLS_KEY_FILE", &s.KeyFile)
	str("AIO_TLS_KEY_PASSWORD_FILE", &s.KeyPasswordFile)
	str("AIO_MQTT_CLIENT_ID", &s.ClientID)
	str("AIO_MQTT_USERNAME", &s.Username)
	str("AIO_MQTT_PASSWORD_FILE", &s.PasswordFile)
	str("AIO_SAT_FILE", &s.SATFile)
	var errs []error
	// num reads a whole number of bits bits; a bad one is an error saying
	// what is wanted (its value is set all the same: the errors end the
	// command).
	num := func(name string, bits int, want string, set func(uint64)) {
		if v, ok := lookup(name); ok {
			n, err := strconv.ParseUint(v, 10, bits)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %s", name, v, want))
			}
			set(n)
		}
	}
	num("AIO_BROKER_TCP_PORT", 16, "not a port number", func(n uint64) { p := uint16(n); s.TCPPort = &p })
	for _, b := range []struct {
		name string
		dst  **bool
	}{{"AIO_MQTT_USE_TLS", &s.UseTLS}, {"AIO_MQTT_CLEAN_START", &s.CleanStart}} {
		if v, ok := lookup(b.name); ok {
			x, err := strconv.ParseBool(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: not a boolean", b.name, v))
			}
			*b.dst = &x
		}
	}
	num("AIO_MQTT_KEEP_ALIVE", 16, "want seconds (0-65535)", func(n uint64) { k := uint16(n); s.KeepAlive = &k })
	num("AIO_MQTT_SESSION_EXPIRY", 32, "want seconds", func(n uint64) { e := uint32(n); s.SessionExpiry = &e })
	return errors.Join(errs...)
}

// connFlags are the command-line connection flags shared by `kv` and `run`.
type connFlags struct {
	broker                                                  string
	tls, noTLS                                              bool
	caFile, certFile, keyFile, clientID, username, passFile string
	satFile                                                 string
}

func (f *connFlags) register(fs *pflag.FlagSet, defaultBroker string) {
	fs.StringVar(&f.broker, "broker", defaultBroker, "broker address HOST:PORT (or set AIO_BROKER_HOSTNAME and AIO_BROKER_TCP_PORT; the port defaults to 8883 with TLS, 1883 without)")
	fs.BoolVar(&f.tls, "tls", false, "connect with TLS (AIO_MQTT_USE_TLS; default: TLS unless the broker is on a loopback address)")
	fs.BoolVar(&f.noTLS, "no-tls", false, "connect without TLS (default: TLS unless the broker is on a loopback address)")
	fs.StringVar(&f.caFile, "ca-file", "", "PEM CA bundle to verify the broker (AIO_TLS_CA_FILE)")
	fs.StringVar(&f.certFile, "cert-file", "", "client certificate PEM (AIO_TLS_CERT_FILE)")
	fs.StringVar(&f.keyFile, "key-file", "", "client key PEM (AIO_TLS_KEY_FILE)")
	fs.StringVar(&f.clientID, "client-id", "", "MQTT client id (AIO_MQTT_CLIENT_ID; default: ssrun-<random>)")
	fs.StringVar(&f.username, "username", "", "MQTT username (AIO_MQTT_USERNAME)")
	fs.StringVar(&f.passFile, "password-file", "", "file holding the MQTT password (AIO_MQTT_PASSWORD_FILE)")
	fs.StringVar(&f.satFile, "sat-file", "", "Kubernetes service account token file for K8S-SAT auth (AIO_SAT_FILE)")
}

// apply overlays the flags that were set on the command line.
func (f *connFlags) apply(fs *pflag.FlagSet, s *connSettings) error {
	if fs.Changed("broker") || s.Hostname == "" && f.broker != "" {
		host, port, err := net.SplitHostPort(f.broker)
		if err != nil {
			return fmt.Errorf("--broker %q: want HOST:PORT", f.broker)
		}
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return fmt.Errorf("--broker %q: bad port", f.broker)
		}
		p := uint16(n)
		s.Hostname, s.TCPPort = host, &p
	}
	if f.tls && f.noTLS {
		return errors.New("--tls and --no-tls contradict each other")
	}
	if f.tls || f.noTLS {
		v := f.tls
		s.UseTLS = &v
	}
	set := func(name, v string, dst *string) {
		if fs.Changed(name) {
			*dst = v
		}
	}
	set("ca-file", f.caFile, &s.CAFile)
	set("cert-file", f.certFile, &s.CertFile)
	set("key-file", f.keyFile, &s.KeyFile)
	set("client-id", f.clientID, &s.ClientID)
	set("username", f.username, &s.Username)
	set("password-file", f.passFile, &s.PasswordFile)
	set("sat-file", f.satFile, &s.SATFile)
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// clientConfig turns the settings into a protocol.Config. Files named in the
// settings are checked now so a typo fails at start, and re-read on every
// connection attempt so rotated credentials are picked up.
func (s connSettings) clientConfig() (protocol.Config, error) {
	if s.Hostname == "" {
		return protocol.Config{}, errors.New("no broker: set --broker HOST:PORT, AIO_BROKER_HOSTNAME, or broker.hostname in ssrun.yaml")
	}
	useTLS := !isLoopback(s.Hostname)
	if s.UseTLS != nil {
		useTLS = *s.UseTLS
	}
	hasTLSFiles := s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" || s.KeyPasswordFile != ""
	if !useTLS && hasTLSFiles {
		return protocol.Config{}, errors.New("TLS files given but TLS is off (AIO_MQTT_USE_TLS=false or --no-tls)")
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return protocol.Config{}, errors.New("a client certificate file and key file must be given together")
	}
	port := uint16(1883)
	if useTLS {
		port = 8883
	}
	if s.TCPPort != nil {
		port = *s.TCPPort
	}
	scheme := "mqtt"
	cfg := protocol.Config{ClientID: s.ClientID}
	if useTLS {
		scheme = "mqtts"
		tc, err := s.tlsConfig()
		if err != nil {
			return protocol.Config{}, err
		}
		cfg.TLS = tc
	}
	cfg.Servers = []string{scheme + "://" + net.JoinHostPort(s.Hostname, strconv.Itoa(int(port)))}
	if s.CleanStart != nil {
		cfg.CleanStart = *s.CleanStart
	}
	cfg.KeepAlive = 60
	if s.KeepAlive != nil {
		cfg.KeepAlive = *s.KeepAlive
	}
	cfg.SessionExpiry = 3600
	if s.SessionExpiry != nil {
		cfg.SessionExpiry = *s.SessionExpiry
	}
	if s.Username != "" || s.PasswordFile != "" || s.SATFile != "" {
		for _, f := range []string{s.PasswordFile, s.SATFile} {
			if f == "" {
				continue
			}
			if _, err := readSecretFile(f); err != nil {
				return protocol.Config{}, fmt.Errorf("credentials: %w", err)
			}
		}
		user, passFile, satFile := s.Username, s.PasswordFile, s.SATFile
		cfg.Credentials = func() (protocol.Credentials, error) {
			c := protocol.Credentials{Username: user}
			if passFile != "" {
				b, err := readSecretFile(passFile)
				if err != nil {
					return c, fmt.Errorf("password file: %w", err)
				}
				c.Password = []byte(strings.TrimRight(string(b), "\r\n"))
			}
			if satFile != "" {
				b, err := readSecretFile(satFile)
				if err != nil {
					return c, fmt.Errorf("SAT file: %w", err)
				}
				c.AuthMethod, c.AuthData = "K8S-SAT", []byte(strings.TrimSpace(string(b)))
			}
			return c, nil
		}
	}
	return cfg, nil
}

func (s connSettings) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: s.Hostname}
	if s.Hostname == "localhost" {
		// As the AIO SDKs do: a deliberate connection to localhost (a
		// port-forward) skips the host name check.
		tc.InsecureSkipVerify = true // #nosec G402
	}
	if s.CAFile != "" {
		pemBytes, err := readSecretFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pemBytes) {
			return nil, fmt.Errorf("CA file %s: no PEM certificates found", s.CAFile)
		}
		tc.RootCAs = pool
	}
	if s.CertFile != "" {
		cert, err := loadKeyPair(s.CertFile, s.KeyFile, s.KeyPasswordFile)
		if err != nil {
			return nil, err
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// loadKeyPair loads a client certificate. With a password file the key may
// be a legacy encrypted PEM ("Proc-Type: 4,ENCRYPTED", e.g. `openssl rsa
// -aes256`), decrypted with the password; an encrypted PKCS#8 key, which
// Go's standard library cannot decrypt, is refused with the command that
// converts it.
func loadKeyPair(certFile, keyFile, passFile string) (tls.Certificate, error) {
	certPEM, err := readSecretFile(certFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("client certificate: %w", err)
	}
	keyPEM, err := readSecretFile(keyFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key file: %w", err)
	}
	if passFile == "" {
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("client certificate: %w", err)
		}
		return cert, nil
	}
	pw, err := readSecretFile(passFile)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("key password file: %w", err)
	}
	blk, _ := pem.Decode(keyPEM)
	switch {
	case blk == nil:
		return tls.Certificate{}, fmt.Errorf("key file %s: no PEM block", keyFile)
	case blk.Type == "ENCRYPTED PRIVATE KEY":
		return tls.Certificate{}, fmt.Errorf("key file %s is an encrypted PKCS#8 key, which ssrun cannot decrypt: convert it with `openssl pkcs8 -in %s -out key.pem` (unencrypted) or `openssl rsa -aes256 -traditional -in %s -out key.pem` (legacy encrypted PEM)", keyFile, keyFile, keyFile)
	case x509.IsEncryptedPEMBlock(blk): //nolint:staticcheck // the legacy format is what AIO_TLS_KEY_PASSWORD_FILE protects
		der, err := x509.DecryptPEMBlock(blk, []byte(strings.TrimRight(string(pw), "\r\n"))) //nolint:staticcheck
		if err != nil {
			return tls.Certificate{}, fmt.Errorf("key file %s: %w", keyFile, err)
		}
		keyPEM = pem.EncodeToMemory(&pem.Block{Type: blk.Type, Bytes: der})
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		// Also where a wrong password ends up about once in 256 tries:
		// legacy PEM encryption has no integrity check, only padding.
		return tls.Certificate{}, fmt.Errorf("client certificate %s with key %s (wrong key password?): %w", certFile, keyFile, err)
	}
	return cert, nil
}
