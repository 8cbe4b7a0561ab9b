package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// go test's single-dash spellings of ssrun test's flags work: the output
// of -json -run REGEX and -v -run=REGEX is that of --json --run and
// --verbose --run.
func TestTestGoStyleFlags(t *testing.T) {
	dir := copyExample(t, "thermostat", "thermostat.lua", "local MIN, MAX  = 16, 28", "local MIN, MAX  = 16, 30")
	elapsed := regexp.MustCompile(`\d+\.\d+s|"Elapsed":[0-9.e-]+|"Time":"[^"]*"`)
	for _, c := range []struct{ single, double []string }{
		{[]string{"test", "-json", "-run", "in_range|clamped", dir}, []string{"test", "--json", "--run", "in_range|clamped", dir}},
		{[]string{"--log-level", "warn", "test", "-v", "-run=in_range", dir}, []string{"--log-level", "warn", "test", "--verbose", "--run=in_range", dir}},
		{[]string{"test", dir, "-v=false", "-json=true"}, []string{"test", dir, "--json"}},
	} {
		a, b := runCLI(t, "", c.single...), runCLI(t, "", c.double...)
		if a.code != b.code || elapsed.ReplaceAllString(a.stdout, "") != elapsed.ReplaceAllString(b.stdout, "") || a.stdout == "" {
			t.Errorf("%q: exit %d\n%s%s\n%q: exit %d\n%s%s", c.single, a.code, a.stdout, a.stderr, c.double, b.code, b.stdout, b.stderr)
		}
	}
}

// Only ssrun test's arguments are rewritten, and none after "--".
func TestNormalizeTestArgs(t *testing.T) {
	var out bytes.Buffer
	root := (&app{stdout: &out, stderr: &out}).rootCmd()
	for _, c := range []struct{ in, want string }{
		{"test -run x -v -json d", "test --run x -v --json d"},
		{"test -run=x -json=false -v=true", "test --run=x --json=false --verbose=true"},
		{"--log-format json test -json", "--log-format json test --json"},
		{"test -- -run", "test -- -run"},
		{"test -vv -runner", "test -vv -runner"},
		{"replay -json t d", "replay -json t d"},
		{"kv get -run", "kv get -run"},
	} {
		if got := strings.Join(normalizeTestArgs(root, strings.Fields(c.in)), " "); got != c.want {
			t.Errorf("%q: %q, want %q", c.in, got, c.want)
		}
	}
}
