package admin_test

import (
	"strings"
	"testing"
)

// With a token, /why and /status answer only a request that carries it as
// a bearer token: none or a wrong one gets 401, and nothing of what they
// show; /healthz, /readyz and /metrics stay open (probes and scrapers carry
// no token). The token is required on loopback too when it is given.
func TestAdminTokenRequired(t *testing.T) {
	const token = "9f0c2a77e1b34d5a8c6e0f1b2d3c4a5e"
	for _, addr := range []string{"0.0.0.0:9310", "127.0.0.1:9310"} {
		base, err := serveAs(t, addr, token)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		for _, path := range []string{"/why?key=door/code", "/status"} {
			for _, auth := range []string{"", "Bearer wrong-token-of-the-same-size!", "Bearer " + token[:len(token)-1], "Basic " + token, token} {
				code, body := fetch(t, base+path, auth)
				if code != 401 || strings.Contains(body, "1234") || strings.Contains(body, "keypad-7") || strings.Contains(body, "secret error") {
					t.Errorf("%s %s with Authorization %q: %d %q; want 401 and nothing of the document", addr, path, auth, code, body)
				}
			}
			for _, auth := range []string{"Bearer " + token, "bearer " + token} {
				if code, body := fetch(t, base+path, auth); code != 200 {
					t.Errorf("%s %s with the token: %d %q, want 200", addr, path, code, body)
				}
			}
		}
		if code, body := fetch(t, base+"/why?key=door/code", "Bearer "+token); !strings.Contains(body, "keypad-7") || !strings.Contains(body, "1234") {
			t.Errorf("%s /why with the token: %d %q, want the write", addr, code, body)
		}
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			if code, body := fetch(t, base+path, ""); code != 200 {
				t.Errorf("%s %s without a token: %d %q, want 200", addr, path, code, body)
			}
		}
	}
}
