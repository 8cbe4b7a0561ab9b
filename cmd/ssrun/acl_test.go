package main

import (
	"regexp"
	"strings"
	"testing"
)

// `ssrun broker --acl FILE` applies the ACL (here without --passwords: user
// names as claimed), and a bad file stops it with file, line and field.
func TestBrokerACLFlag(t *testing.T) {
	acl := writeFile(t, "acl.yaml", `authorizationPolicies:
  rules:
    - principals: {usernames: [bob]}
      brokerResources: [{method: Connect}]
      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: ["bob/*"]}]
`)
	out, _, stop := start(t, "broker", "--listen", "127.0.0.1:0", "--acl", acl)
	addr := waitOutput(t, out, regexp.MustCompile(`listening on (\S+)\n`))[1]
	if r := runCLI(t, "", "kv", "--broker", addr, "--username", "bob", "set", "bob/x", "1"); r.code != 0 {
		t.Fatalf("granted key: %+v", r)
	}
	if r := runCLI(t, "", "kv", "--broker", addr, "--username", "bob", "set", "alice/x", "1"); r.code != 2 || !strings.Contains(r.stderr, "not authorized") {
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
