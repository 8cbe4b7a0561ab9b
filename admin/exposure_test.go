package admin_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ssrun/ssrun/admin"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/internal/testutil"
)

// whySource is what /why and /status show in these tests: a value and the
// client id of its writer, which nobody without the token may read.
var whySource = fakeHost{
	rules:  []host.RuleStatus{{Path: "/rules/alarm.lua", Kind: "lua", State: host.StateRunning, LastError: "secret error"}},
	writes: map[string]provenance.Write{"door/code": {Key: "door/code", Rule: "alarm.lua", Op: "SET", Value: "1234", ValueSize: 4, Origin: &provenance.Origin{Key: "door/code", Op: "SET", Client: "keypad-7"}}},
}

// serveAs builds a server configured for addr with cfg's token, serving
// /why and /status of whySource (as dev and run do) and /metrics, and
// starts it on a 127.0.0.1 listener: whatever addr says, the test listens
// on loopback only. It returns the server's base URL, or Start's error.
func serveAs(t *testing.T, addr, token string) (string, error) {
	t.Helper()
	return serveWith(t, addr, token, func(srv *admin.Server) {
		srv.Handle("GET /why", admin.WhyHandler(whySource))
		srv.Handle("GET /status", admin.StatusHandler(whySource))
		srv.HandleOpen("GET /metrics", admin.NewMetrics().Handler())
	})
}

// serveWith starts a server configured for addr with token, listening on
// 127.0.0.1, with what register adds; it returns its URL, or Start's
// error.
func serveWith(t *testing.T, addr, token string, register func(*admin.Server)) (string, error) {
	t.Helper()
	return serveConfig(t, admin.Config{Addr: addr, Token: token}, register)
}

// serveConfig is serveWith for a server of cfg (its Listener and Logger
// set here).
func serveConfig(t *testing.T, cfg admin.Config, register func(*admin.Server)) (string, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger, cfg.Listener = quiet, ln
	srv, err := admin.New(cfg)
	if err != nil {
		_ = ln.Close()
		t.Fatal(err)
	}
	register(srv)
	if err := srv.Start(context.Background()); err != nil {
		_ = ln.Close()
		return "", err
	}
	testutil.CloseAtEnd(t, "admin server", srv.Close)
	return "http://" + srv.Addr(), nil
}

// fetch GETs url with the Authorization header auth ("" for none) and
// returns the status and body.
func fetch(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A server configured for an address other hosts may reach, serving /why
// and /status, does not start without a token: its error names the
// address and what the endpoints would show. On loopback it starts, and
// so does a server off loopback that serves only the probes and /metrics.
// (Every server here listens on 127.0.0.1; the address
// configured is what the decision is made on.)
func TestAdminOffLoopbackRefusedWithoutToken(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:9310", "[::]:9310", "10.1.2.3:9310", "ssrun.example:9310"} {
		base, err := serveAs(t, addr, "")
		if err == nil {
			code, body := fetch(t, base+"/why?key=door/code", "")
			t.Errorf("%s: started without a token, and /why answered %d %q to a request without one", addr, code, body)
			continue
		}
		if !errors.Is(err, admin.ErrTokenRequired) || !strings.Contains(err.Error(), addr) || !strings.Contains(err.Error(), "/status, /why") {
			t.Errorf("%s: %v; want ErrTokenRequired naming the address and /status, /why", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:9310", "127.9.9.9:9310", "localhost:9310", "[::1]:9310", "9310"} {
		if _, err := serveAs(t, addr, ""); err != nil {
			t.Errorf("%s: %v; want it to start without a token on loopback", addr, err)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	probes, err := admin.New(admin.Config{Addr: "0.0.0.0:9310", Logger: quiet, Listener: ln})
	if err != nil {
		t.Fatal(err)
	}
	probes.HandleOpen("GET /metrics", admin.NewMetrics().Handler())
	if err := probes.Start(context.Background()); err != nil {
		t.Fatalf("probes and metrics only, off loopback: %v; want it to start", err)
	}
	testutil.CloseAtEnd(t, "admin server", probes.Close)
}
