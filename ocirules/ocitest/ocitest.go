// Package ocitest serves a real OCI registry (go-containerregistry's
// pkg/registry, an implementation independent of the client ssrun uses)
// on a random port of 127.0.0.1 for tests, with hooks to make it hostile:
// a wrapper sees and may change every request and response.
package ocitest

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/registry"
)

// Registry is a registry served for one test.
type Registry struct {
	// Host is its address, 127.0.0.1:PORT: oci://HOST/REPO:TAG names an
	// artifact in it.
	Host string
	// CAFile is, for a TLS registry, a PEM file of its certificate.
	CAFile string

	srv *httptest.Server
	mu  sync.Mutex
	log []string
}

// Options of Start.
type Options struct {
	TLS bool // serve HTTPS with a self-signed certificate (CAFile)
	// User and Password, when set, are required (HTTP basic auth).
	User, Password string
	// Wrap, when set, wraps the registry's handler: a test's hostile
	// registry.
	Wrap func(http.Handler) http.Handler
}

// Start serves a registry until the test ends (Close ends it sooner: its
// port is then closed, as a registry that is down).
func Start(tb testing.TB, o Options) *Registry {
	tb.Helper()
	r := &Registry{}
	var h http.Handler = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	if o.Wrap != nil {
		h = o.Wrap(h)
	}
	inner := h
	h = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.mu.Lock()
		r.log = append(r.log, req.Method+" "+req.URL.Path)
		r.mu.Unlock()
		if o.User != "" {
			if u, p, ok := req.BasicAuth(); !ok || u != o.User || p != o.Password {
				w.Header().Set("WWW-Authenticate", `Basic realm="ocitest"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		inner.ServeHTTP(w, req)
	})
	r.srv = httptest.NewUnstartedServer(h)             // listens on 127.0.0.1, a random port
	r.srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused TLS handshakes are what tests want
	if o.TLS {
		r.srv.StartTLS()
		r.CAFile = filepath.Join(tb.TempDir(), "registry-ca.pem")
		cert := r.srv.TLS.Certificates[0]
		if err := os.WriteFile(r.CAFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Certificate[0]}), 0o644); err != nil {
			tb.Fatal(err)
		}
	} else {
		r.srv.Start()
	}
	r.Host = strings.TrimPrefix(strings.TrimPrefix(r.srv.URL, "http://"), "https://")
	tb.Cleanup(r.Close)
	return r
}

// Close stops the registry; its port is closed from then on.
func (r *Registry) Close() { r.srv.Close() }

// Requests returns "METHOD PATH" of each request served so far.
func (r *Registry) Requests() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.log...)
}

// Count returns how many requests served so far match method and contain
// part in their path.
func (r *Registry) Count(method, part string) int {
	n := 0
	for _, l := range r.Requests() {
		if m, p, _ := strings.Cut(l, " "); m == method && strings.Contains(p, part) {
			n++
		}
	}
	return n
}

// KeyPair makes an ed25519 key pair and writes it as openssl writes it
// (`openssl genpkey -algorithm ed25519`: PKCS #8 PEM; `openssl pkey
// -pubout`: PKIX PEM) into a temporary directory of tb. It returns the
// private key and the two files.
func KeyPair(tb testing.TB) (key ed25519.PrivateKey, keyFile, pubFile string) {
	tb.Helper()
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	pubDER, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		tb.Fatal(err)
	}
	dir := tb.TempDir()
	keyFile, pubFile = filepath.Join(dir, "rules.key"), filepath.Join(dir, "rules.pub")
	for _, f := range []struct {
		path, typ string
		der       []byte
		mode      os.FileMode
	}{{keyFile, "PRIVATE KEY", keyDER, 0o600}, {pubFile, "PUBLIC KEY", pubDER, 0o644}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), f.mode); err != nil {
			tb.Fatal(err)
		}
	}
	return key, keyFile, pubFile
}
