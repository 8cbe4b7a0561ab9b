package main

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

func TestConnectionHints(t *testing.T) {
	r := runCLI(t, "", "kv", "--broker", "127.0.0.1:1", "get", "k") // the default --timeout, 10s: a refusal must not wait for it
	if r.code != exitFailed || !strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, "start `ssrun broker` or `ssrun dev`") {
		t.Fatalf("refused: %+v", r)
	}
	// 192.0.2.1 (TEST-NET-1) is not loopback: TLS is chosen, and a
	// connection error says so (checked without connecting there).
	port := uint16(1883)
	s := connSettings{Hostname: "192.0.2.1", TCPPort: &port}
	cfg, err := s.clientConfig()
	if err != nil || cfg.Servers[0] != "mqtts://192.0.2.1:1883" {
		t.Fatalf("non-loopback broker: %v %v", cfg.Servers, err)
	}
	if msg := withTLSNote(errors.New("connecting"), s).Error(); !strings.Contains(msg, "uses TLS") || !strings.Contains(msg, "--no-tls") {
		t.Fatalf("non-loopback broker: %s", msg)
	}
	off := false
	s.UseTLS = &off
	if msg := withTLSNote(errors.New("connecting"), s).Error(); strings.Contains(msg, "uses TLS") {
		t.Fatalf("with --no-tls: %s", msg)
	}
}

// `ssrun run` keeps trying a broker that refuses, and says what to do.
func TestRunSaysBrokerRefused(t *testing.T) {
	out, errw, stop := start(t, "run", t.TempDir(), "--broker", "127.0.0.1:1")
	waitOutput(t, out, regexp.MustCompile(`0 rule\(s\) from`))
	waitOutput(t, errw, regexp.MustCompile("broker unreachable; retrying until it answers.*connection refused.*start `ssrun broker` or `ssrun dev`"))
	if code := stop(); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, errw.String())
	}
}
