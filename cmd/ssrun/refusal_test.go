package main

import (
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
)

// runBin runs the ssrun binary to its end, bounded by cliBound, with env
// added to the environment.
func runBin(t *testing.T, env []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cliBound)
	defer cancel()
	cmd := exec.CommandContext(ctx, ssrunBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("ssrun %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

// hashed returns the bcrypt hash of pw, for broker.Config.Users.
func hashed(t *testing.T, pw string) []byte {
	t.Helper()
	h, err := broker.HashPassword([]byte(pw))
	if err != nil {
		t.Fatal(err)
	}
	return []byte(h)
}

// A login the broker refuses for good (wrong password, a client id bound to
// another user, no Connect grant) ends `ssrun kv` at once with the CONNACK's
// reason, who was refused and what to do, with exit status 4: not after
// its --timeout (here 5 minutes, which only a deadline would reach) with
// "context deadline exceeded".
func TestKVLoginRefusedAtOnce(t *testing.T) {
	acl := writeFile(t, "acl.yaml", `authorizationPolicies:
  rules:
    - principals: {usernames: [alice, bob]}
      brokerResources: [{method: Connect}]
      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: ["*"]}]
users:
  bob: {clientIds: ["bobs-*"]}
`)
	b := brokertest.Start(t, func(c *broker.Config) {
		c.Users = map[string][]byte{"alice": hashed(t, "alice-pw"), "bob": hashed(t, "bob-pw"), "carol": hashed(t, "carol-pw")}
		c.ACLFile = acl
	})
	pw := func(s string) string { return writeFile(t, "pw", s+"\n") }
	kv := func(user, password string, args ...string) result {
		return runBin(t, nil, append([]string{"kv", "--broker", b.Addr(), "--timeout", "5m", "--username", user, "--password-file", pw(password)}, args...)...)
	}
	if r := kv("alice", "alice-pw", "set", "k", "v"); r.code != 0 {
		t.Fatalf("a granted login: %+v", r)
	}
	for _, c := range []struct {
		name         string
		user, pw     string
		args         []string
		want, wanted string
	}{
		{"wrong password", "alice", "nope", nil, "bad user name or password (CONNACK reason code 0x86)", "--password-file"},
		{"client id of another user", "alice", "alice-pw", []string{"--client-id", "bobs-phone"}, "client identifier not valid (CONNACK reason code 0x85)", "--client-id"},
		{"no Connect grant", "carol", "carol-pw", nil, "not authorized (CONNACK reason code 0x87)", "grants this user or client id no Connect"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			r := kv(c.user, c.pw, append(c.args, "get", "k")...)
			if r.code != exitUnauthorized || !strings.Contains(r.stderr, c.want) || !strings.Contains(r.stderr, c.wanted) ||
				!strings.Contains(r.stderr, `user "`+c.user+`"`) || strings.Contains(r.stderr, "deadline") {
				t.Fatalf("exit %d, want %d with %q and %q naming the user:\n%s", r.code, exitUnauthorized, c.want, c.wanted, r.stderr)
			}
			if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
				t.Errorf("%d lines on stderr, want the one that says it:\n%s", n+1, r.stderr)
			}
		})
	}
}

// `ssrun run` refused at start says who was refused and why, once however
// often it tries again, shows it on /readyz, and connects by itself once
// the password file is rotated.
func TestRunLoginRefusedRetries(t *testing.T) {
	b := brokertest.Start(t, func(c *broker.Config) { c.Users = map[string][]byte{"rules": hashed(t, "right")} })
	pwFile := writeFile(t, "pw", "wrong\n")
	p := startProc(t, "run", t.TempDir(), "--broker", b.Addr(), "--username", "rules", "--password-file", pwFile,
		"--admin", "127.0.0.1:0", "--log-level", "debug")
	addr := waitOutput(t, p.stdout, adminListening)[1]
	waitReadyz(t, addr, http.StatusServiceUnavailable, "not connected to the state store: the broker refused the connection: bad user name or password (CONNACK reason code 0x86)")
	waitOutput(t, p.stderr, regexp.MustCompile(`ssrun run refused by the broker; retrying with backoff.*user \\"rules\\".*0x86`))
	waitOutput(t, p.stderr, regexp.MustCompile(`refused the connection again`))
	if err := os.WriteFile(pwFile, []byte("right\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, addr, http.StatusOK, "[+]store ok")
	logs := p.stderr.String()
	for _, said := range []string{"level=ERROR msg=\"the broker refused the connection", "ssrun run refused by the broker"} {
		if n := strings.Count(logs, said); n != 1 {
			t.Errorf("%q said %d times, want once:\n%s", said, n, logs)
		}
	}
	p.signal(os.Interrupt)
	if code := p.wait("run"); code != 0 {
		t.Fatalf("run exit %d:\n%s", code, p.stderr.String())
	}
}
