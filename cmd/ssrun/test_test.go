package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ssrun/ssrun/internal/testutil"
)

// copyRule copies the files of an example folder into a temporary folder,
// applying edit (old -> new) to the file named file.
func copyExample(t *testing.T, example, file, old, new string) string {
	t.Helper()
	dir := t.TempDir()
	src := filepath.Join("..", "..", "examples", example)
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == file {
			if !strings.Contains(string(b), old) {
				t.Fatalf("%s has no %q", file, old)
			}
			b = []byte(strings.Replace(string(b), old, new, 1))
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// Every example's test file passes: what .ci/run runs.
func TestTestExamplesPass(t *testing.T) {
	r := runCLI(t, "", "test", "../../examples/...")
	if r.code != 0 {
		t.Fatalf("ssrun test examples/...: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, ex := range []string{"thermostat/", "thermostat-as/rules/", "chain/", "door-alarm/", "compressor/", "active-standby/"} {
		if !strings.Contains(r.stdout, "ok  \t../../examples/"+ex) {
			t.Errorf("no passing test file for examples/%s:\n%s", ex, r.stdout)
		}
	}
}

// A thermostat whose maximum was changed from 28 to 30 fails its tests,
// and the output names the case and the step and shows the difference.
func TestTestCatchesBrokenThermostat(t *testing.T) {
	dir := copyExample(t, "thermostat", "thermostat.lua", "local MIN, MAX  = 16, 28", "local MIN, MAX  = 16, 30")
	r := runCLI(t, "", "test", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{
		"--- FAIL: thermostat.test.yaml/a_set_point_above_the_range_is_clamped_and_written_back (",
		`    step 1 (set thermostat1/setPoint="35", line 20):`,
		"writes (- want, + got):",
		"- SET hvac1/target 28\n",
		"+ SET hvac1/target 30\n",
		`store hvac1/target: want "28", got "30"`,
		`logs: no line contains "set point 35 clamped to 28"`,
		"FAIL\t" + filepath.Join(dir, "thermostat.test.yaml"),
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("output lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "a_set_point_in_range_drives_the_target") {
		t.Errorf("a passing case is printed without -v:\n%s", r.stdout)
	}
	if !strings.Contains(r.stderr, "1 case(s) failed") {
		t.Errorf("stderr: %q", r.stderr)
	}
}

// --run selects cases; --json prints one go test -json object per line.
func TestTestRunAndJSON(t *testing.T) {
	dir := copyExample(t, "thermostat", "thermostat.lua", "local MIN, MAX  = 16, 28", "local MIN, MAX  = 16, 30")
	r := runCLI(t, "", "test", "--json", "--run", "in_range|clamped", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
	}
	actions := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		var ev struct{ Action, Package, Test, Output string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("not JSON: %q: %v", line, err)
		}
		if ev.Action != "output" {
			actions[ev.Test] = append(actions[ev.Test], ev.Action)
		}
	}
	want := map[string]string{
		"thermostat.test.yaml/a_set_point_in_range_drives_the_target":                  "run pass",
		"thermostat.test.yaml/a_set_point_above_the_range_is_clamped_and_written_back": "run fail",
		"": "fail",
	}
	if len(actions) != len(want) {
		t.Errorf("tests run: %v, want %v", actions, want)
	}
	for test, w := range want {
		if got := strings.Join(actions[test], " "); got != w {
			t.Errorf("%q: actions %q, want %q", test, got, w)
		}
	}
}

// A test file that is wrong is bad input (exit 2) named by file and line.
func TestTestBadFile(t *testing.T) {
	dir := copyExample(t, "thermostat", "thermostat.test.yaml", "      - set: {thermostat1/setPoint: \"21.5\"}", "      - advance: soon")
	r := runCLI(t, "", "test", dir)
	want := filepath.Join(dir, "thermostat.test.yaml") + `: line 7: case "a set point in range drives the target", step 1: advance "soon": want a duration`
	if r.code != 2 || !strings.Contains(r.stderr, want) {
		t.Fatalf("exit %d, stderr %q; want 2 and %q", r.code, r.stderr, want)
	}
	r = runCLI(t, "", "test", t.TempDir())
	if r.code != 2 || !strings.Contains(r.stderr, "no test files") {
		t.Fatalf("empty folder: exit %d, stderr %q", r.code, r.stderr)
	}
}

// The rules get their folder's ssrun.yaml: a write the permissions refuse
// fails the rule, as it would under ssrun dev.
func TestTestAppliesSsrunYAML(t *testing.T) {
	dir := copyExample(t, "thermostat", "thermostat.lua", "", "")
	cfg := "rules:\n  thermostat.lua:\n    write: [thermostat1/*]\n"
	testutil.WriteFiles(t, dir, map[string]string{"ssrun.yaml": cfg})
	r := runCLI(t, "", "test", "--run", "in_range", dir)
	if r.code != 1 || !strings.Contains(r.stdout, "status of thermostat.lua: want handled 1 failed 0, got handled 0 failed 1") ||
		!strings.Contains(r.stdout, "DENIED") {
		t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// math.random is seeded under ssrun test: two runs of a case draw the
// same number (shown in the diff of an expectation that cannot hold).
func TestTestSeedsRandom(t *testing.T) {
	dir := t.TempDir()
	testutil.WriteFiles(t, dir, map[string]string{
		"r.lua":       "local ss = require(\"ssrun\")\nss.watch(\"go\")\nfunction on_event(ev) assert(ss.set(\"n\", tostring(math.random(1000000)))) end\n",
		"r.test.yaml": "cases:\n  - name: r\n    steps:\n      - set: {go: \"1\"}\n        expect: {writes: [SET n x]}\n",
	})
	drawn := func() string {
		r := runCLI(t, "", "test", dir)
		_, n, ok := strings.Cut(r.stdout, "+ SET n ")
		if r.code != 1 || !ok {
			t.Fatalf("exit %d, want 1 with the write in the diff\n%s%s", r.code, r.stdout, r.stderr)
		}
		n, _, _ = strings.Cut(n, "\n")
		return n
	}
	if a, b := drawn(), drawn(); a != b {
		t.Errorf("two runs drew %s and %s", a, b)
	}
}
