package admin_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/admin"
)

func TestListenAddr(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{in: "9310", want: "127.0.0.1:9310"},
		{in: ":9310", want: "127.0.0.1:9310"},
		{in: "0.0.0.0:9310", want: "0.0.0.0:9310"},
		{in: "localhost:0", want: "localhost:0"},
		{in: "[::1]:9310", want: "[::1]:9310"},
		{in: "", err: "empty"},
		{in: "host:port", err: `port "port" is not a number`},
		{in: "99999", err: `port "99999"`},
		{in: "a:b:c", err: "want HOST:PORT"},
	} {
		got, err := admin.ListenAddr(c.in)
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("ListenAddr(%q) = %q, %v; want an error with %q", c.in, got, err, c.err)
		case c.err == "" && (err != nil || got != c.want):
			t.Errorf("ListenAddr(%q) = %q, %v; want %q", c.in, got, err, c.want)
		}
	}
}

// A server answers its probes and added handlers, fails to start on a port
// in use, and Close stops it (goleak in TestMain checks its goroutine).
func TestServerLifecycle(t *testing.T) {
	s, err := admin.New(admin.Config{Addr: "127.0.0.1:0", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Handle("GET /hello", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hi") }))
	ready := errors.New("warming up")
	s.ReadyCheck("warm", func() error { return ready })
	ctx := context.Background()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	base := "http://" + s.Addr()
	for _, c := range []struct {
		path string
		code int
		body string
	}{
		{"/healthz", 200, "ok\n"},
		{"/hello", 200, "hi"},
		{"/readyz", 503, "[-]warm failed: warming up\nreadyz check failed\n"},
		{"/nothing", 404, ""},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != c.code || (c.body != "" && string(b) != c.body) {
			t.Errorf("GET %s: %d %q, want %d %q", c.path, resp.StatusCode, b, c.code, c.body)
		}
		if c.path == "/readyz" && resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Errorf("/readyz Content-Type %q", resp.Header.Get("Content-Type"))
		}
	}
	other, err := admin.New(admin.Config{Addr: s.Addr(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx); err == nil {
		_ = other.Close(ctx)
		t.Fatal("a second server on the same port started")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := http.Get(base + "/healthz"); err == nil {
		t.Fatal("still answering after Close")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
