package testrun

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// FuzzParse feeds arbitrary text to the test file parser: it never panics,
// its errors name the file and are the same on every parse, and a file it
// accepts holds what check promises (named cases with steps, each step one
// action, a duration that is not negative) and passes check again unchanged.
func FuzzParse(f *testing.F) {
	var files []string
	for _, pat := range []string{"../examples/*/*.test.yaml", "../examples/*/*/*.test.yaml", "../cmd/ssrun/testdata/parity/*/*.test.yaml"} {
		m, err := filepath.Glob(pat)
		if err != nil {
			f.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) == 0 {
		f.Fatal("no test files to seed from")
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, s := range []string{
		"rules: [r.lua]\nstart: 2026-03-01T12:00:00+01:00\ncases:\n  - name: a\n    seed: 7\n    store: {k: v}\n    steps:\n      - set: {a: b, c: d}\n        expect: {writes: [], store: {a: b, z: null}, logs: [x], no_logs: [y], timers: {r.lua: [t]}, status: {r.lua: {handled: 1, failed: 0, coalesced: 2, dropped: 0}}}\n      - delete: [a, c]\n      - advance: 1m30s\n      - store: down\n      - lose_lock: L\n      - fence: L\n      - reload: {r.lua: r_v2.txt}\n",
		"cases:\n  - name: a\n    steps:\n      - set: {a: b}\n        advance: 1s\n",
		"cases:\n  - name: a\n    steps:\n      - sett: {a: b}\n",
		"cases:\n  - name: a\n    steps:\n      - store: sideways\n",
		"cases:\n  - name: a\n    steps: [{advance: 1s, expect: {writes: [PUT a]}}]\n",
		"cases:\n  - name: a\n    steps: [{delete: k}]\n  - name: a\n",
		"cases:\n  - name: a\n    steps: [{delete: k, expect: {status: {r.lua: {handeld: 1}}}}]\n",
		"cases:\n  - name: a\n    steps: [{reload: {r.lua: ../v2.lua}}]\n",
		"cases:\n  - &c {name: a, steps: [{advance: -1s}]}\n  - *c\n",
		"cases:\n  - name: a\n    steps: [{set: {<<: {a: b}}}]\n",
		"start: yesterday\ncases: []\n",
		"",
		"---\n",
		"cases:\n- name: a\n  steps: [{advance: 1s}]\n---\ncases: 1\n",
	} {
		f.Add([]byte(s))
	}
	const path = "some dir/x.test.yaml"
	f.Fuzz(func(t *testing.T, src []byte) {
		file, err := Parse(path, src)
		_, err2 := Parse(path, src)
		if (err == nil) != (err2 == nil) || (err != nil && err.Error() != err2.Error()) {
			t.Fatalf("%q: parsed twice: %v, then %v", src, err, err2)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), path+": ") {
				t.Fatalf("%q: error does not name the file: %v", src, err)
			}
			return
		}
		if file.Path != path || file.start.IsZero() || len(file.Cases) == 0 {
			t.Fatalf("%q: accepted as %+v", src, file)
		}
		// YAML breaks lines at \n, \r and (UTF-8) NEL, LS and PS: at most
		// one line for each of these bytes, and one more.
		lines := 1
		for _, b := range src {
			if b == '\n' || b == '\r' || b == 0x85 || b == 0xa8 || b == 0xa9 {
				lines++
			}
		}
		utf16 := bytes.HasPrefix(src, []byte{0xfe, 0xff}) || bytes.HasPrefix(src, []byte{0xff, 0xfe})
		names := map[string]bool{}
		for _, c := range file.Cases {
			if c.Name == "" || names[c.Name] || len(c.Steps) == 0 {
				t.Fatalf("%q: case %q accepted (empty name, a second time, or no steps)", src, c.Name)
			}
			names[c.Name] = true
			if c.Line < 1 || (c.Line > lines && !utf16) {
				t.Fatalf("%q: case %q at line %d of %d", src, c.Name, c.Line, lines)
			}
			for _, s := range c.Steps {
				if s.Line < 1 || (s.Line > lines && !utf16) {
					t.Fatalf("%q: step at line %d of %d", src, s.Line, lines)
				}
				if s.advance < 0 {
					t.Fatalf("%q: step %s: advance %v", src, s.String(), s.advance)
				}
				if s.Advance != "" {
					if d, err := time.ParseDuration(s.Advance); err != nil || d != s.advance {
						t.Fatalf("%q: advance %q parsed as %v", src, s.Advance, s.advance)
					}
				}
				action, _, _ := strings.Cut(s.String(), " ")
				if !slices.Contains([]string{"set", "delete", "advance", "store", "lose_lock", "fence", "reload"}, action) {
					t.Fatalf("%q: step described as %q", src, s.String())
				}
			}
		}
		before := *file
		before.Cases = append([]Case(nil), file.Cases...)
		for i, c := range before.Cases {
			before.Cases[i].Steps = append([]Step(nil), c.Steps...)
		}
		if err := file.check(); err != nil {
			t.Fatalf("%q: accepted, but checked again: %v", src, err)
		}
		if !reflect.DeepEqual(before, *file) {
			t.Fatalf("%q: checked again, changed from %+v to %+v", src, before, *file)
		}
	})
}

// An empty document after the one that holds the cases (a trailing ---, or
// one holding only a comment) is no second document.
func TestParseTrailingEmptyDocument(t *testing.T) {
	for _, src := range []string{
		"cases:\n  - name: a\n    steps: [{delete: k}]\n---\n",
		"cases:\n  - name: a\n    steps: [{delete: k}]\n---\n# nothing here\n",
		"cases:\n  - name: a\n    steps: [{delete: k}]\n...\n",
	} {
		f, err := Parse("f.yaml", []byte(src))
		if err != nil || len(f.Cases) != 1 {
			t.Errorf("Parse(%q) = %v", src, err)
		}
	}
}
