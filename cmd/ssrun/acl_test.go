package main

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker"
	"github.com/ssrun/ssrun/broker/brokertest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// bobACL writes an ACL that lets the user bob connect and use the keys
// bob/*, and nothing else.
func bobACL(t *testing.T) string {
	t.Helper()
	return writeFile(t, "acl.yaml", `authorizationPolicies:
  rules:
    - principals: {usernames: [bob]}
      brokerResources: [{method: Connect}]
      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: ["bob/*"]}]
`)
}

// bobKV starts an embedded broker with bobACL and returns it and a run of
// the ssrun binary's `kv` command on it as the user bob.
func bobKV(t *testing.T) (*broker.Broker, func(args ...string) result) {
	t.Helper()
	acl := bobACL(t)
	b := brokertest.Start(t, func(c *broker.Config) { c.ACLFile = acl })
	return b, func(args ...string) result {
		t.Helper()
		return runBin(t, nil, append([]string{"kv", "--broker", b.Addr(), "--username", "bob"}, args...)...)
	}
}

// `ssrun broker --acl FILE` applies the ACL (here without --passwords: user
// names as claimed), and a bad file stops it with file, line and field.
func TestBrokerACLFlag(t *testing.T) {
	acl := bobACL(t)
	out, _, stop := start(t, "broker", "--listen", "127.0.0.1:0", "--acl", acl)
	addr := waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))[1]
	if r := runCLI(t, "", "kv", "--broker", addr, "--username", "bob", "set", "bob/x", "1"); r.code != 0 {
		t.Fatalf("granted key: %+v", r)
	}
	if r := runCLI(t, "", "kv", "--broker", addr, "--username", "bob", "set", "alice/x", "1"); r.code != exitUnauthorized || !strings.Contains(r.stderr, "not authorized") {
		t.Fatalf("key outside the grants: %+v", r)
	}
	if code := stop(); code != 0 {
		t.Fatalf("broker exit %d", code)
	}

	acl = writeFile(t, "acl.yaml", "authorizationPolicies:\n  rules:\n    - principals: {usernames: [bob]}\n      brokerResources: [{method: Pub}]\n")
	r := runCLI(t, "", "broker", "--listen", "127.0.0.1:0", "--acl", acl)
	if r.code == 0 || !strings.Contains(r.stderr, acl+":4: authorizationPolicies.rules[0].brokerResources[0].method: unknown method \"Pub\"") {
		t.Fatalf("bad ACL file: %+v", r)
	}
}

// The documented example loads.
func TestBrokerACLExample(t *testing.T) {
	out, _, stop := start(t, "broker", "--listen", "127.0.0.1:0", "--acl", "../../docs/acl.example.yaml", "--authorize")
	waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))
	if code := stop(); code != 0 {
		t.Fatalf("broker exit %d", code)
	}
}

// passwordFile writes a password file (user:bcrypt-hash lines) for the
// users and passwords given, and one file per user holding its password;
// it returns the password file and the users' files.
func passwordFile(t *testing.T, users map[string]string) (string, map[string]string) {
	t.Helper()
	var lines strings.Builder
	pw := map[string]string{}
	for u, p := range users {
		lines.WriteString(u + ":" + string(hashed(t, p)) + "\n")
		pw[u] = writeFile(t, u+".pw", p+"\n")
	}
	return writeFile(t, "users.txt", lines.String()), pw
}

// The shipped ACL example works with the shipped tools: `ssrun dev
// --passwords --acl docs/acl.example.yaml` starts its rules (its own user
// has a rule there), and `ssrun kv` as an operator and as the rules user,
// with their default client ids, reads and writes what the example grants.
func TestACLExampleWithDevAndKV(t *testing.T) {
	users, pw := passwordFile(t, map[string]string{"ops-alice": "alice-secret", "rules": "rules-secret"})
	p, addr := startDev(t, thermostatCopy(t), "--passwords", users, "--acl", "../../docs/acl.example.yaml")
	kv := func(user string, args ...string) result {
		return runBin(t, nil, append([]string{"kv", "--broker", addr, "--username", user, "--password-file", pw[user]}, args...)...)
	}
	if r := kv("ops-alice", "set", "thermostat1/setPoint", "30"); r.code != 0 {
		t.Fatalf("kv set as ops-alice: %+v\ndev:\n%s", r, p.stderr.String())
	}
	testutil.WaitFor(t, "the rule's write of hvac1/target", func() bool {
		return kv("ops-alice", "get", "hvac1/target").stdout == "28\n"
	})
	if r := kv("rules", "get", "thermostat1/setPoint"); r.code != 0 || r.stdout != "28\n" {
		t.Fatalf("kv get as rules (default client id): %+v", r)
	}
	if r := kv("rules", "get", "hvac1/target"); r.code != exitUnauthorized || !strings.Contains(r.stderr, "not authorized") {
		t.Fatalf("kv get of a key the rules user may only write: %+v", r)
	}
}

// `ssrun dev` whose ACL does not let its own user in says which user and
// client id were refused, why and what to add; it starts its rules as soon
// as the ACL file is fixed (the broker reloads it).
func TestDevRefusedByACLSaysWhoAndRecovers(t *testing.T) {
	users, _ := passwordFile(t, map[string]string{"ops-alice": "alice-secret"})
	acl := writeFile(t, "acl.yaml", `authorizationPolicies:
  rules:
    - principals: {usernames: ["ops-*"]}
      brokerResources: [{method: Connect}]
`)
	p := startProc(t, "dev", thermostatCopy(t), "--listen", "127.0.0.1:0", "--passwords", users, "--acl", acl)
	waitOutput(t, p.stderr, regexp.MustCompile(`ssrun dev's rules host refused by the broker.*user \\"ssrun-dev\\", client id \\"ssrun-dev-[0-9a-f]+\\".*not authorized \(CONNACK reason code 0x87\).*grants user \\"ssrun-dev\\" no Connect`))
	example, err := os.ReadFile("../../docs/acl.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(acl, example, 0o600); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p.stdout, regexp.MustCompile(`try: ssrun kv --broker \S+ set`))
}

// The password file is reloaded like the ACL, as docs/security.md says: a
// user added by an edit is let in, without a restart, and one removed is
// refused.
func TestBrokerPasswordFileReloaded(t *testing.T) {
	users, pw := passwordFile(t, map[string]string{"alice": "alice-secret"})
	p := startProc(t, "broker", "--listen", "127.0.0.1:0", "--passwords", users)
	addr := waitOutput(t, p.stdout, regexp.MustCompile(`listening on (\S+)\n`))[1]
	if r := runBin(t, nil, "kv", "--broker", addr, "--username", "alice", "--password-file", pw["alice"], "set", "k", "v"); r.code != 0 {
		t.Fatalf("alice: %+v", r)
	}
	only, bobPW := passwordFile(t, map[string]string{"bob": "bob-secret"})
	b, err := os.ReadFile(only)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(users+".tmp", b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(users+".tmp", users); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p.stderr, regexp.MustCompile(`level=INFO msg="password file reloaded"`))
	if r := runBin(t, nil, "kv", "--broker", addr, "--username", "bob", "--password-file", bobPW["bob"], "set", "k", "v"); r.code != 0 {
		t.Fatalf("bob after the edit: %+v", r)
	}
	if r := runBin(t, nil, "kv", "--broker", addr, "--username", "alice", "--password-file", pw["alice"], "set", "k", "v"); r.code != exitUnauthorized {
		t.Fatalf("alice after her removal: %+v", r)
	}
}
