package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// --otlp-endpoint goes with --admin: ssrun run without it is a usage
// error, and so is an endpoint that is not a collector's address.
func TestOTLPFlagNeedsAdmin(t *testing.T) {
	dir := checkDir(t, map[string]string{"good.lua": goodRule})
	r := runCLI(t, "", "run", dir, "--broker", "127.0.0.1:1", "--otlp-endpoint", "http://127.0.0.1:4318")
	if r.code != 2 || !strings.Contains(r.stderr, "--otlp-endpoint goes with --admin") {
		t.Errorf("run without --admin: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = runCLI(t, "", "dev", dir, "--listen", "127.0.0.1:0", "--otlp-endpoint", "ftp://127.0.0.1:4318")
	if r.code != 2 || !strings.Contains(r.stderr, "the scheme is http or https") {
		t.Errorf("dev with an ftp endpoint: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = runCLI(t, "", "dev", dir, "--listen", "127.0.0.1:0", "--otlp-endpoint", "http://127.0.0.1:4318", "--otlp-sample", "1.5")
	if r.code != 2 || !strings.Contains(r.stderr, "--otlp-sample 1.5: want a ratio") {
		t.Errorf("dev with --otlp-sample 1.5: exit %d, stderr:\n%s", r.code, r.stderr)
	}
	r = runCLI(t, "", "dev", dir, "--listen", "127.0.0.1:0", "--otlp-sample", "0.5")
	if r.code != 2 || !strings.Contains(r.stderr, "--otlp-sample goes with --otlp-endpoint") {
		t.Errorf("dev with --otlp-sample alone: exit %d, stderr:\n%s", r.code, r.stderr)
	}
}

// ssrun dev --otlp-endpoint sends the chain's runs to the collector (at
// the latest when it stops).
func TestOTLPDev(t *testing.T) {
	var traces atomic.Int32
	var spans atomic.Pointer[string]
	col := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			traces.Add(1)
			s := string(b)
			spans.Store(&s)
		}
	}))
	defer col.Close()
	dir := t.TempDir()
	copyFile(t, "../../examples/chain/door.lua", dir+"/door.lua", 0o644)
	p, brokerAddr := startDev(t, dir, "--otlp-endpoint", col.URL)
	addr := waitOutput(t, p.stdout, adminListening)[1]
	if r := runCLI(t, "", "kv", "--broker", brokerAddr, "set", "door/front", "open"); r.code != 0 {
		t.Fatalf("%+v", r)
	}
	testutil.WaitFor(t, "door.lua's run", func() bool {
		return strings.Contains(runCLI(t, "", "status", "--admin", addr, "-o", "json").stdout, `"handled": 1`)
	})
	p.signal(syscall.SIGTERM)
	if code := p.wait("ssrun dev"); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if traces.Load() == 0 {
		t.Fatal("no trace export")
	}
	if last := *spans.Load(); !strings.Contains(last, "rule door.lua") {
		t.Errorf("%d trace exports; the last: %q", traces.Load(), last)
	}
}
