package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/protocoltest"
)

// `ssrun kv keys PATTERN` lists every matching key (several SCAN pages
// here), as text, JSON lines or a count, and exits 1 when none matches;
// with an ACL it lists only what the user may read.
func TestKVKeys(t *testing.T) {
	b, kv := bobKV(t)
	var want []string
	for i := range 1200 {
		want = append(want, fmt.Sprintf("bob/%04d", i))
	}
	// One client sets them all: a process per key would take long.
	ctx := context.Background()
	c := protocoltest.Connect(t, protocol.Config{Servers: []string{b.Addr()}, ClientID: "bob-loader",
		Credentials: func() (protocol.Credentials, error) { return protocol.Credentials{Username: "bob"}, nil }})
	for _, k := range want {
		if _, err := c.Set(ctx, []byte(k), []byte("v"), protocol.SetOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if r := kv("keys", "bob/*"); r.code != 0 || strings.TrimSpace(r.stdout) != strings.Join(want, "\n") {
		t.Fatalf("keys bob/*: exit %d, %d lines", r.code, strings.Count(r.stdout, "\n"))
	}
	if r := kv("keys", "bob/00?1", "-o", "json"); r.code != 0 {
		t.Fatalf("keys -o json: %+v", r)
	} else {
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		var o struct{ Key string }
		if len(lines) != 10 || json.Unmarshal([]byte(lines[0]), &o) != nil || o.Key != "bob/0001" {
			t.Fatalf("keys -o json: %q", r.stdout)
		}
	}
	if r := kv("keys", "*", "--count"); r.code != 0 || strings.TrimSpace(r.stdout) != "1200" {
		t.Fatalf("keys * --count as bob: %+v", r)
	}
	if r := kv("keys", "nothing/*"); r.code != 1 || !strings.Contains(r.stderr, "no key matches") {
		t.Fatalf("keys with no match: %+v", r)
	}
	if r := kv("keys", "["); r.code != 3 || !strings.Contains(r.stderr, "syntax error") {
		t.Fatalf("keys with a bad pattern: %+v", r)
	}
}
