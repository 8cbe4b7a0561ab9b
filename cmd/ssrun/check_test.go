package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// checkDir writes files (name -> content; a name ending in "*" is written
// executable, without the star) into a new folder and returns it.
func checkDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		mode := os.FileMode(0o644)
		if n, ok := strings.CutSuffix(name, "*"); ok {
			name, mode = n, 0o755
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const goodRule = "local ss = require('ssrun')\nss.watch('in')\nfunction on_event(ev) ss.set('out', ev.value) end\n"

// TestCheckRefusesWhatDevRefuses: `ssrun check FOLDER` fails, exit status 1,
// on each thing dev would not load, naming the file and, where there is
// one, the line; the good rule next to it is still reported ok.
func TestCheckRefusesWhatDevRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string // in stderr; DIR is the folder
	}{
		{"no on_event", map[string]string{"bad.lua": "local ss = require('ssrun')\nss.watch('a')\n"},
			"DIR/bad.lua: load: the rule defines no global function on_event(ev)"},
		{"unknown ss name in a handler", map[string]string{"bad.lua": "local ss = require('ssrun')\nfunction on_event(ev)\n  ss.sett('a', 'b')\nend\n"},
			`DIR/bad.lua:3: ss.sett: the ssrun module has no function "sett"`},
		{"error at top level", map[string]string{"bad.lua": "local ss = require('ssrun')\nlocal t = nil\nlocal x = t.y\nfunction on_event() end\n"},
			"DIR/bad.lua:3: load: attempt to index"},
		{"syntax error", map[string]string{"bad.lua": "function on_event(ev)\n  if then\nend\n"},
			"DIR/bad.lua:2:"},
		{"watch outside its permissions", map[string]string{
			"bad.lua":    "local ss = require('ssrun')\nassert(ss.watch('secret'))\nfunction on_event() end\n",
			"ssrun.yaml": "rules:\n  bad.lua:\n    watch: [\"public/**\"]\n  good.lua: {}\n"},
			"DIR/bad.lua:2: load: watch \"secret\""},
		{"malformed pattern", map[string]string{"bad.lua": "local ss = require('ssrun')\n\nss.watch_pattern('thermostats/[')\nfunction on_event() end\n"},
			`DIR/bad.lua:3: load: watch_pattern "thermostats/[": invalid pattern: unterminated [ in pattern`},
		{"pattern outside its read permissions", map[string]string{
			"bad.lua":    "local ss = require('ssrun')\nss.watch_pattern('secret/*')\nfunction on_event() end\n",
			"ssrun.yaml": "rules:\n  bad.lua:\n    read: [\"public/**\"]\n  good.lua: {}\n"},
			`DIR/bad.lua:2: load: watch_pattern "secret/*": pattern outside the rule's permissions: no key it matches can be read`},
		// The host's own guard checks a checked rule's calls: its limits
		// and the forms of its calls, not only its permissions.
		{"value over the rule's max_value", map[string]string{
			"bad.lua":    "local ss = require('ssrun')\nassert(ss.set('out', 'eight by'))\nfunction on_event() end\n",
			"ssrun.yaml": "rules:\n  bad.lua:\n    max_value: 4\n  good.lua: {}\n"},
			`DIR/bad.lua:2: load: set "out": value of 8 bytes exceeds the rule's limit of 4`},
		{"timer name too long", map[string]string{"bad.lua": "local ss = require('ssrun')\nassert(ss.timer(string.rep('t', 300), 1000))\nfunction on_event() end\n"},
			"DIR/bad.lua:2: load: timer: timer name of 300 bytes is longer than"},
		{"concurrency and canary from two entries", map[string]string{
			"bad.lua":    "function on_event() end\n",
			"ssrun.yaml": "rules:\n  \"b*.lua\": {concurrency: 4}\n  bad.lua: {canary: {events: 5}}\n  good.lua: {}\n"},
			"DIR/bad.lua: concurrency: 4 cannot be combined with canary"},
		{"plugin without handshake", map[string]string{"bad*": "#!/bin/sh\necho not a plugin\n"},
			"DIR/bad"},
		{"bad ssrun.yaml", map[string]string{"ssrun.yaml": "defaults:\n  timeout: 1s\n  timout: 2s\n"},
			`config DIR/ssrun.yaml: line 3: unknown setting "timout"`},
		{"rule entry matching no file", map[string]string{"ssrun.yaml": "defaults:\n  timeout: 1s\nrules:\n  good.lua: {}\n  therm.lua:\n    watch: []\n"},
			`config DIR/ssrun.yaml: line 5: rules: "therm.lua" matches no rule file in DIR`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.files["good.lua"] = goodRule
			dir := checkDir(t, tc.files)
			r := runCLI(t, "", "check", dir)
			want := strings.ReplaceAll(tc.want, "DIR", dir)
			if r.code != 1 || !strings.Contains(r.stderr, want) {
				t.Fatalf("exit %d, stderr:\n%s\nwant exit 1 and %q", r.code, r.stderr, want)
			}
			if strings.HasPrefix(tc.name, "bad ssrun.yaml") {
				return // nothing loads under a config dev refuses
			}
			if !strings.Contains(r.stdout, "ok "+filepath.Join(dir, "good.lua")+"\n") {
				t.Errorf("stdout %q: the good rule is not reported ok", r.stdout)
			}
			// The rule file alone fails the same way, unless the folder's
			// ssrun.yaml gives it the settings it fails on.
			bad, _ := filepath.Glob(filepath.Join(dir, "bad*"))
			if _, settings := tc.files["ssrun.yaml"]; len(bad) == 1 && !settings {
				if r := runCLI(t, "", "check", bad[0]); r.code != 1 || !strings.Contains(r.stderr, want) {
					t.Errorf("check %s: exit %d, stderr:\n%s", bad[0], r.code, r.stderr)
				}
			}
		})
	}
}

// TestCheckWASMWithWrongImports: a module importing a host function the ABI
// does not have is refused, naming the file and the import.
func TestCheckWASMWithWrongImports(t *testing.T) {
	p, err := builds.WASM("unknownimport.wasm", "../../runtime/wasm/testdata/unknownimport")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	rule := filepath.Join(dir, "rule.wasm")
	copyFile(t, p, rule, 0o644)
	r := runCLI(t, "", "check", dir)
	if r.code != 1 || !strings.Contains(r.stderr, rule) || !strings.Contains(r.stderr, "get_v2") {
		t.Fatalf("%+v", r)
	}
}

// TestCheckConfigFlag: --config replaces FOLDER/ssrun.yaml, and its
// mistakes are named with its own path and line.
func TestCheckConfigFlag(t *testing.T) {
	dir := checkDir(t, map[string]string{"good.lua": goodRule, "ssrun.yaml": "rules:\n  nothing.lua: {}\n"})
	cfg := filepath.Join(t.TempDir(), "other.yaml")
	if err := os.WriteFile(cfg, []byte("rules:\n  good.lua:\n    memory: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "check", "--config", cfg, dir)
	if r.code != 1 || !strings.Contains(r.stderr, "config "+cfg+": line 3:") || strings.Contains(r.stderr, "nothing.lua") {
		t.Fatalf("%+v", r)
	}
	if err := os.WriteFile(cfg, []byte("rules:\n  good.lua:\n    memory: 1MiB\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, "", "check", "--config", cfg, dir); r.code != 0 || r.stdout != "ok "+filepath.Join(dir, "good.lua")+"\n" {
		t.Fatalf("with a good --config: %+v", r)
	}
}

// TestCheckFolderSelection: a folder is checked for exactly the files dev
// loads from it: READMEs, test files and data are not rules and are not
// reported; hidden files and editor backups neither.
func TestCheckFolderSelection(t *testing.T) {
	dir := checkDir(t, map[string]string{
		"good.lua":       goodRule,
		"README.md":      "# rules\n",
		"good_test.yaml": "cases: [\n", // not even YAML: not read
		"good_test.json": "{",
		"data.json":      "{}",
		".hidden.lua":    "broken(",
		"good.lua~":      "broken(",
		"ssrun.yaml":     "rules:\n  \"*.lua\": {}\n",
	})
	r := runCLI(t, "", "check", dir)
	if r.code != 0 || r.stdout != "ok "+filepath.Join(dir, "good.lua")+"\n" || r.stderr != "" {
		t.Fatalf("%+v", r)
	}
}

// TestCheckExamples: every example folder checks clean.
func TestCheckExamples(t *testing.T) {
	dirs, err := filepath.Glob("../../examples/*")
	if err != nil {
		t.Fatal(err)
	}
	okLine := regexp.MustCompile(`(?m)^ok `)
	rules := 0
	for _, d := range append(dirs, "../../examples/thermostat-as/rules") {
		if filepath.Base(d) == "internal" {
			continue
		}
		r := runCLI(t, "", "check", d)
		if r.code != 0 {
			t.Errorf("ssrun check %s: %+v", d, r)
		}
		rules += len(okLine.FindAllString(r.stdout, -1))
	}
	if rules < 7 {
		t.Errorf("%d rules checked in the examples, want every Lua and WebAssembly one (7)", rules)
	}
}

// TestCheckBuiltExamples: the Go examples, built as their READMEs say (a
// WebAssembly rule each, a plugin), check clean: the modules' imports and
// exports are right and the plugin handshakes.
func TestCheckBuiltExamples(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"thermostat-go", "door-alarm-go"} {
		p, err := builds.WASM(name+".wasm", "../../examples/"+name)
		if err != nil {
			t.Fatal(err)
		}
		copyFile(t, p, filepath.Join(dir, name+".wasm"), 0o644)
	}
	copyFile(t, filepath.Join(pluginRules(t), "batch-summary"), filepath.Join(dir, "batch-summary"), 0o755)
	r := runCLI(t, "", "check", dir)
	if r.code != 0 || strings.Count(r.stdout, "ok ") != 3 {
		t.Fatalf("%+v", r)
	}
}
