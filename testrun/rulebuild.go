package testrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A rule file built from sources (a WebAssembly module from Go or
// AssemblyScript, a plugin from Go) is found in its project by the layout
// `ssrun new` writes: PROJECT/rules/NAME.wasm (or PROJECT/NAME.wasm) with
// PROJECT/go.mod, or PROJECT/asconfig.json and PROJECT/assembly/. For such
// a file, a missing one is reported with the command that builds it, and
// one older than its sources is warned about.

// staleSlack is how much newer than the built file a source must be to
// count as changed after the build: a fresh checkout writes the sources
// and a committed build moments apart, in any order.
const staleSlack = 2 * time.Second

// ruleBuild is how the rule file at path is built.
type ruleBuild struct {
	proj    string   // the project folder
	command string   // the build command, run in proj
	sources []string // globs of the sources, relative to proj
}

// buildOf returns how the rule file at path is built, if it lies in a
// project laid out as `ssrun new` writes it.
func buildOf(path string) (ruleBuild, bool) {
	dir := filepath.Dir(path)
	for _, proj := range []string{dir, filepath.Dir(dir)} {
		rel, err := filepath.Rel(proj, path)
		if err != nil {
			continue
		}
		rel = filepath.ToSlash(rel)
		wasm := strings.HasSuffix(path, ".wasm")
		switch {
		case exists(filepath.Join(proj, "go.mod")) && wasm:
			return ruleBuild{proj, "GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o " + rel + " .", []string{"*.go", "go.mod", "go.sum"}}, true
		case exists(filepath.Join(proj, "go.mod")) && filepath.Ext(path) == "":
			return ruleBuild{proj, "go build -o " + rel + " .", []string{"*.go", "go.mod", "go.sum"}}, true
		case exists(filepath.Join(proj, "asconfig.json")) && exists(filepath.Join(proj, "assembly")) && wasm:
			return ruleBuild{proj, "npm ci && npm run build", []string{"asconfig.json", "assembly/*.ts", "assembly/*/*.ts"}}, true
		}
	}
	return ruleBuild{}, false
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// missingRule explains err, the failed stat of the rule file at path, with
// the command that builds it when it is built from sources.
func missingRule(path string, err error) error {
	b, ok := buildOf(path)
	if !ok || !os.IsNotExist(err) {
		return err
	}
	return fmt.Errorf("%s does not exist: build it first, in %s: %s", path, b.proj, b.command)
}

// staleRule returns a warning when a source of the rule file at path,
// modified at built, is newer than it; "" otherwise.
func staleRule(path string, built time.Time) string {
	b, ok := buildOf(path)
	if !ok {
		return ""
	}
	var newest string
	var at time.Time
	for _, g := range b.sources {
		matches, _ := filepath.Glob(filepath.Join(b.proj, g))
		for _, m := range matches {
			info, err := os.Stat(m)
			if err != nil || !info.Mode().IsRegular() || strings.HasSuffix(m, "_test.go") {
				continue
			}
			if info.ModTime().After(at) {
				newest, at = m, info.ModTime()
			}
		}
	}
	if newest == "" || !at.After(built.Add(staleSlack)) {
		return ""
	}
	return fmt.Sprintf("%s is older than its source %s: the tests run the old build; rebuild it, in %s: %s", path, newest, b.proj, b.command)
}
