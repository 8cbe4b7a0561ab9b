package main

import (
	"regexp"
	"strings"
	"testing"
)

func TestConnectionHints(t *testing.T) {
	r := runCLI(t, "", "kv", "--broker", "127.0.0.1:1", "get", "k") // the default --timeout, 10s: a refusal must not wait for it
	if r.code != 2 || !strings.Contains(r.stderr, "connection refused") || !strings.Contains(r.stderr, "start `ssrun broker` or `ssrun dev`") {
		t.Fatalf("refused: %+v", r)
	}
	// 192.0.2.1 (TEST-NET-1) is not loopback: TLS is chosen, and said so.
	r = runCLI(t, "", "kv", "--broker", "192.0.2.1:1883", "--timeout", "300ms", "get", "k")
	if r.code != 2 || !strings.Contains(r.stderr, "mqtts://192.0.2.1:1883") || !strings.Contains(r.stderr, "uses TLS") || !strings.Contains(r.stderr, "--no-tls") {
		t.Fatalf("non-loopback broker: %+v", r)
	}
	if r := runCLI(t, "", "kv", "--broker", "192.0.2.1:1883", "--no-tls", "--timeout", "300ms", "get", "k"); strings.Contains(r.stderr, "uses TLS") {
		t.Fatalf("with --no-tls: %+v", r)
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
