package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeToken writes token into a new file and returns its path.
func writeToken(t *testing.T, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// dev with --admin off loopback and no --admin-token-file is refused before
// anything listens, with the fix; so is a token file that holds no usable
// token. (192.0.2.1 is a documentation address no machine has, so nothing
// could listen there even if the check were missing.)
func TestAdminOffLoopbackNeedsTokenFile(t *testing.T) {
	dir := checkDir(t, map[string]string{"good.lua": goodRule})
	r := runCLI(t, "", "dev", dir, "--listen", "127.0.0.1:0", "--admin", "192.0.2.1:0")
	for _, w := range []string{"--admin: admin endpoint 192.0.2.1:0", "reachable from other hosts needs a token", "/status, /why", "--admin-token-file FILE (or SSRUN_ADMIN_TOKEN_FILE)"} {
		if r.code != 2 || !strings.Contains(r.stderr, w) {
			t.Errorf("exit %d, stderr:\n%s\nwant exit 2 and %q", r.code, r.stderr, w)
		}
	}
	short := writeToken(t, "tooshort")
	r = runCLI(t, "", "dev", dir, "--listen", "127.0.0.1:0", "--admin", "192.0.2.1:0", "--admin-token-file", short)
	if want := "the token is 8 bytes, want at least 16"; r.code != 2 || !strings.Contains(r.stderr, short) || !strings.Contains(r.stderr, want) {
		t.Errorf("short token: exit %d, stderr:\n%s\nwant exit 2, the file and %q", r.code, r.stderr, want)
	}
}

// ssrun status and ssrun why send the token of --admin-token-file, or of
// SSRUN_ADMIN_TOKEN_FILE, to an endpoint that has one; without it they say
// the endpoint needs one, and with another token that it was refused.
func TestStatusAndWhySendTheAdminToken(t *testing.T) {
	dir := checkDir(t, map[string]string{"good.lua": goodRule})
	token := writeToken(t, "0123456789abcdef0123456789abcdef")
	out, errw, stop := start(t, "dev", dir, "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0", "--admin-token-file", token)
	addr := waitOutput(t, out, adminListening)[1]
	waitReady(t, addr) // /readyz and /metrics need no token
	if r := runCLI(t, "", "status", "--admin", addr); r.code != 2 || !strings.Contains(r.stderr, "needs a token: give --admin-token-file FILE (or SSRUN_ADMIN_TOKEN_FILE)") {
		t.Errorf("status without a token: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	wrong := writeToken(t, "fedcba9876543210fedcba9876543210")
	if r := runCLI(t, "", "why", "out", "--admin", addr, "--admin-token-file", wrong); r.code != 2 || !strings.Contains(r.stderr, "refused the token in "+wrong) {
		t.Errorf("why with a wrong token: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, "", "status", "--admin", addr, "--admin-token-file", token); r.code != 0 || !strings.Contains(r.stdout, "good.lua") {
		t.Errorf("status with the token: exit %d, stdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	t.Setenv("SSRUN_ADMIN_TOKEN_FILE", token)
	if r := runCLI(t, "", "why", "out", "--admin", addr); r.code != 1 || !strings.Contains(r.stderr, `no rule wrote "out"`) {
		t.Errorf("why with the token from SSRUN_ADMIN_TOKEN_FILE: exit %d, stderr:\n%s; want exit 1: no rule wrote it", r.code, r.stderr)
	}
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d; stderr:\n%s", code, errw.String())
	}
}
