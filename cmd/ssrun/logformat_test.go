package main

import (
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/broker/brokertest"
)

func devLogs(t *testing.T, args ...string) string {
	t.Helper()
	out, errw, stop := start(t, append([]string{"dev", t.TempDir(), "--listen", "127.0.0.1:0"}, args...)...)
	waitOutput(t, out, regexp.MustCompile(`try: ssrun kv`))
	if code := stop(); code != 0 {
		t.Fatalf("dev exit %d:\n%s", code, errw.String())
	}
	return errw.String()
}

func jsonLines(t *testing.T, logs string) bool {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(logs), "\n")
	for _, l := range lines {
		var m map[string]any
		if json.Unmarshal([]byte(l), &m) != nil || m["time"] == nil || m["level"] == nil || m["msg"] == nil {
			return false
		}
	}
	return len(lines) > 0
}

func TestLogFormat(t *testing.T) {
	if logs := devLogs(t, "--log-format", "json"); !jsonLines(t, logs) || !strings.Contains(logs, `"msg":"state store broker listening"`) {
		t.Fatalf("--log-format json:\n%s", logs)
	}
	if logs := devLogs(t); jsonLines(t, logs) || !strings.Contains(logs, `msg="state store broker listening"`) {
		t.Fatalf("default format:\n%s", logs)
	}
	if r := runCLI(t, "", "--log-format", "xml", "check", "x.lua"); r.code != 2 || !strings.Contains(r.stderr, `--log-format "xml": want text or json`) {
		t.Fatalf("bad --log-format: %+v", r)
	}
}

func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("SSRUN_LOG_FORMAT", "json")
	if logs := devLogs(t); !jsonLines(t, logs) {
		t.Fatalf("SSRUN_LOG_FORMAT=json:\n%s", logs)
	}
	if logs := devLogs(t, "--log-format", "text"); jsonLines(t, logs) {
		t.Fatalf("--log-format text with SSRUN_LOG_FORMAT=json: the flag must win:\n%s", logs)
	}

	b := brokertest.Start(t)
	t.Setenv("SSRUN_BROKER", b.Addr())
	if r := runCLI(t, "", "kv", "set", "k", "v"); r.code != 0 {
		t.Fatalf("kv with SSRUN_BROKER: %+v", r)
	}
	if r := runCLI(t, "", "kv", "get", "k", "--broker", "127.0.0.1:1"); r.code != exitFailed || !strings.Contains(r.stderr, "127.0.0.1:1") {
		t.Fatalf("--broker must win over SSRUN_BROKER: %+v", r)
	}

	t.Setenv("SSRUN_SHUTDOWN_TIMEOUT", "soon")
	if r := runCLI(t, "", "dev", t.TempDir()); r.code != 2 || !strings.Contains(r.stderr, `SSRUN_SHUTDOWN_TIMEOUT="soon"`) {
		t.Fatalf("bad SSRUN_SHUTDOWN_TIMEOUT: %+v", r)
	}
	t.Setenv("SSRUN_SHUTDOWN_TIMEOUT", "")
	os.Unsetenv("SSRUN_SHUTDOWN_TIMEOUT")
	t.Setenv("SSRUN_LOG_LEVEL", "loud")
	if r := runCLI(t, "", "check", "x.lua"); r.code != 2 || !strings.Contains(r.stderr, `SSRUN_LOG_LEVEL "loud"`) {
		t.Fatalf("bad SSRUN_LOG_LEVEL: %+v", r)
	}
}

func TestHelpDocumentsEnvironment(t *testing.T) {
	if r := runCLI(t, "", "--help"); r.code != 0 || !strings.Contains(r.stdout, "SSRUN_LOG_FORMAT=json") {
		t.Fatalf("%+v", r)
	}
}

// A message of several lines is written as lines in text format: the
// record with the first, then each other line indented with a tab and its
// control characters escaped, so none passes for a record of its own.
func TestTextLogWritesLinesOfAMessage(t *testing.T) {
	var b strings.Builder
	h, err := logHandler(&b, "text", slog.LevelInfo)
	if err != nil {
		t.Fatal(err)
	}
	slog.New(h).With("rule", "r.wasm").Error("handler panic: boom\ngoroutine 1 [running]:\n\tmain.f()\ntime=forged level=ERROR msg=\x1b[2Jforged\xff")
	want := regexp.MustCompile(`^time=\S+ level=ERROR msg="handler panic: boom" rule=r\.wasm
	goroutine 1 \[running\]:
		main\.f\(\)
	time=forged level=ERROR msg=\\x1b\[2Jforged\\xff
$`)
	if !want.MatchString(b.String()) {
		t.Fatalf("got:\n%s", b.String())
	}
}
