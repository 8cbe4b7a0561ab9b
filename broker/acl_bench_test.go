package broker

import (
	"strconv"
	"strings"
	"testing"
)

// BenchmarkACLChecks measures the decisions on the hot paths: a delivery
// on the client's own response topic (default policy), and topic and key
// decisions against an ACL of 50 rules that all name the client.
func BenchmarkACLChecks(b *testing.B) {
	var doc strings.Builder
	doc.WriteString("authorizationPolicies:\n  rules:\n")
	for i := range 50 {
		doc.WriteString("    - principals: {usernames: [\"user" + strconv.Itoa(i) + "*\", bob]}\n" +
			"      brokerResources: [{method: Connect}, {method: Subscribe, topics: [\"x/+/y/#\"]}]\n" +
			"      stateStoreResources: [{method: ReadWrite, keyType: Pattern, keys: [\"k*/[a-z]?\", \"bob/{principal.clientId}/*\"]}]\n")
	}
	p, err := parseACL("bench.yaml", []byte(doc.String()))
	if err != nil {
		b.Fatal(err)
	}
	def, acl := newDecider(nil, "bob", "myclient"), newDecider(p, "bob", "myclient")
	own := def.s.pr.respHex + "/statestore/v1/FA9AE35F-2F64-47CD-9BFF-08E2B32A0FE8/command/invoke/response"
	for _, bc := range []struct {
		name string
		fn   func() bool
	}{
		{"own-response-default", func() bool { return def.sub(own) }},
		{"granted-topic-50-rules", func() bool { return acl.sub("x/1/y/z") }},
		{"denied-topic-50-rules", func() bool { return acl.sub("q/1/y/z") }},
		{"granted-key-50-rules", func() bool { return acl.write("bob/myclient/some/key") }},
		{"denied-key-50-rules", func() bool { return acl.write("zzz/zzz/zzz/zzz") }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				bc.fn()
			}
		})
	}
}
