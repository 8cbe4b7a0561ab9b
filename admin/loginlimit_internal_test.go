package admin

import (
	"fmt"
	"net/http"
	"testing"
	"time"
)

// IPv6 addresses count per /64; past maxAuthAddresses new addresses share
// one count, so a flood of addresses neither grows the map nor escapes the
// limit.
func TestAuthFailuresBounded(t *testing.T) {
	for remote, want := range map[string]string{
		"192.0.2.7:5000":             "192.0.2.7",
		"[2001:db8:1:2:aaaa::1]:443": "2001:db8:1:2::/64",
		"[2001:db8:1:2:bbbb::9]:443": "2001:db8:1:2::/64",
	} {
		if got := source(&http.Request{RemoteAddr: remote}); got != want {
			t.Errorf("source of %s: %q, want %q", remote, got, want)
		}
	}
	now := time.Date(2026, 11, 29, 6, 0, 0, 0, time.UTC)
	f := newAuthFailures(func() time.Time { return now }, 0)
	for i := range maxAuthAddresses {
		f.fail(fmt.Sprintf("10.0.%d.%d", i/256, i%256))
	}
	for i := range maxAuthFailures {
		if f.blocked("198.51.100.1") != 0 {
			t.Fatalf("a newcomer blocked after %d shared failures", i)
		}
		f.fail(fmt.Sprintf("198.51.100.%d", i))
	}
	if len(f.addrs) != maxAuthAddresses+1 {
		t.Errorf("%d addresses kept, want %d and the shared count", len(f.addrs), maxAuthAddresses)
	}
	if f.blocked("198.51.100.200") != time.Minute {
		t.Errorf("a newcomer after %d shared failures: not blocked for the minute", maxAuthFailures)
	}
	now = now.Add(time.Minute)
	f.fail("203.0.113.1") // the old windows ended: pruned
	if len(f.addrs) != 1 || f.blocked("198.51.100.200") != 0 {
		t.Errorf("after the minute: %d addresses kept, want 1 and nobody blocked", len(f.addrs))
	}
}
