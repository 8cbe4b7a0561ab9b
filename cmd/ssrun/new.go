package main

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"strings"
	"text/template"

	"github.com/spf13/cobra"
)

// newTemplates are the files `ssrun new` writes, as text/template sources
// with [[ ]] delimiters (Lua, Go and YAML use braces). Every name ends in
// .tmpl, so the go tool sees no package or module in them.
//
//go:embed newtemplates
var newTemplates embed.FS

// scaffoldGoVersion is the go line of a scaffold's go.mod: the ssrun
// module's own (a test keeps them equal), the least a module requiring it
// may declare.
const scaffoldGoVersion = "1.26.0"

// ssrunModule is the module a Go scaffold requires.
const ssrunModule = "github.com/ssrun/ssrun"

// replacedVersion is the version a go.mod requires of a module it
// replaces with a directory: the one the go tool writes itself.
const replacedVersion = "v0.0.0-00010101000000-000000000000"

// ruleNameRE is what a scaffold's NAME may be: it names the rule file, the
// keys, the Go module and the npm package, so it keeps to what all accept.
var ruleNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// scaffold is what the templates see.
type scaffold struct {
	Name      string // the rule's name
	Rule      string // the rule's file name in its folder (NAME.lua, NAME.wasm, NAME)
	TestDir   string // the folder to give `ssrun test`, as the user would type it
	GoVersion string // go.mod's go line
	Version   string // the ssrun module version go.mod requires
	Replace   string // the ssrun checkout go.mod replaces the module with; "" for none
	SDK       string // the AssemblyScript guest SDK, relative to the project, with slashes
}

// scaffoldFile is one file to write: its template and where it goes.
type scaffoldFile struct{ tmpl, dst string }

// newCmd is `ssrun new`: a rule to start from, with a passing test.
func (a *app) newCmd() *cobra.Command {
	var dir, checkout string
	cmd := &cobra.Command{
		Use:   "new lua|go|assemblyscript|plugin NAME",
		Short: "Write a new rule to start from, with a test file that passes",
		Long: `Write a new rule to start from, with a test file that passes under
ssrun test. The rule copies NAME/input to NAME/output.

  lua             DIR/NAME.lua and DIR/NAME.test.yaml
  go              DIR/NAME/: main.go (WebAssembly, GOOS=wasip1), go.mod, README.md,
                  rules/NAME.test.yaml (against rules/NAME.wasm once built)
  plugin          DIR/NAME/: main.go (a native plugin), go.mod, README.md,
                  rules/NAME.test.yaml (against rules/NAME once built)
  assemblyscript  DIR/NAME/: package.json and package-lock.json (the pinned
                  compiler), asconfig.json, assembly/index.ts, README.md,
                  rules/NAME.test.yaml (against rules/NAME.wasm once built)

A Go scaffold's go.mod requires github.com/ssrun/ssrun at this binary's
version; with --ssrun CHECKOUT it uses that ssrun checkout instead (a replace
directive), as a development build of ssrun must. The AssemblyScript guest
SDK is not on npm: assemblyscript needs --ssrun and uses the SDK from the
checkout by relative path. Existing files are never overwritten.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.newRule(args[0], args[1], dir, checkout)
		},
	}
	cmd.Flags().StringVar(&dir, "dir", ".", "the folder to write in")
	cmd.Flags().StringVar(&checkout, "ssrun", "", "an ssrun checkout (its root folder) the scaffold builds against")
	return cmd
}

// newRule writes the scaffold of kind named name under dir.
func (a *app) newRule(kind, name, dir, checkout string) error {
	if !ruleNameRE.MatchString(name) {
		return usageError("new: invalid rule name %q: use 1 to 63 lowercase letters, digits, '-' and '_', starting with a letter (it names the file, the keys, the Go module and the npm package)", name)
	}
	sc := scaffold{Name: name, GoVersion: scaffoldGoVersion}
	var root string // the folder written in
	var files []scaffoldFile
	switch kind {
	case "lua":
		root, sc.Rule, sc.TestDir = dir, name+".lua", dir
		files = []scaffoldFile{{"lua/NAME.lua", name + ".lua"}, {"test.yaml", name + ".test.yaml"}}
	case "go", "plugin":
		root, sc.TestDir = filepath.Join(dir, name), "rules"
		sc.Rule = name
		if kind == "go" {
			sc.Rule += ".wasm"
		}
		files = []scaffoldFile{{kind + "/main.go", "main.go"}, {"gomod", "go.mod"}, {kind + "/README.md", "README.md"},
			{"test.yaml", "rules/" + name + ".test.yaml"}}
	case "assemblyscript":
		root, sc.Rule, sc.TestDir = filepath.Join(dir, name), name+".wasm", "rules"
		files = []scaffoldFile{{"assemblyscript/package.json", "package.json"}, {"assemblyscript/package-lock.json", "package-lock.json"},
			{"assemblyscript/asconfig.json", "asconfig.json"}, {"assemblyscript/assembly/index.ts", "assembly/index.ts"},
			{"assemblyscript/README.md", "README.md"}, {"test.yaml", "rules/" + name + ".test.yaml"}}
	default:
		return usageError("new: unknown kind %q: want lua, go, assemblyscript or plugin", kind)
	}
	if err := sc.module(kind, root, checkout); err != nil {
		return usageError("new %s %s: %v", kind, name, err)
	}
	out, err := renderScaffold(sc, files)
	if err != nil {
		return err
	}
	for _, f := range files { // all or nothing: check every file before writing one
		p := filepath.Join(root, filepath.FromSlash(f.dst))
		if _, err := os.Lstat(p); err == nil {
			return usageError("new: %s already exists: not overwritten (remove it, or choose another NAME or --dir)", p)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return usageError("new: %v", err)
		}
	}
	for i, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.dst))
		if err := writeNew(p, out[i]); err != nil {
			return usageError("new: %v", err)
		}
		fmt.Fprintf(a.stdout, "wrote %s\n", p)
	}
	return nil
}

// module sets what a kind needs of the ssrun module: for go and plugin,
// the version go.mod requires (or the checkout it replaces it with), for
// assemblyscript the SDK's path from the project folder root.
func (sc *scaffold) module(kind, root, checkout string) error {
	if kind == "lua" {
		return nil
	}
	if checkout != "" {
		abs, err := ssrunCheckout(checkout)
		if err != nil {
			return err
		}
		if kind == "assemblyscript" {
			proj, err := filepath.Abs(root)
			if err != nil {
				return err
			}
			rel, err := filepath.Rel(proj, filepath.Join(abs, "abi", "guest", "assemblyscript"))
			if err != nil {
				return fmt.Errorf("--ssrun %s: %w", checkout, err)
			}
			sc.SDK = filepath.ToSlash(rel)
			return nil
		}
		sc.Replace, sc.Version = abs, replacedVersion
		return nil
	}
	if kind == "assemblyscript" {
		return errors.New("the AssemblyScript guest SDK is not published on npm: give --ssrun PATH, the root of an ssrun checkout")
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("this ssrun has no build information to take a module version from: give --ssrun PATH, the root of an ssrun checkout")
	}
	v, err := requiredVersion(bi)
	sc.Version = v
	return err
}

// requiredVersion is the version of the ssrun module a Go scaffold made by
// this binary requires: its own module version, which must be one the go
// tool can fetch (not a development build's "(devel)", nor one with
// uncommitted changes).
func requiredVersion(bi *debug.BuildInfo) (string, error) {
	v := bi.Main.Version
	if bi.Main.Path != ssrunModule || v == "" || v == "(devel)" || strings.Contains(v, "+") {
		return "", fmt.Errorf("this ssrun is a development build (module %q version %q), not a version go.mod can require: give --ssrun PATH, the root of the ssrun checkout to build against", bi.Main.Path, v)
	}
	return v, nil
}

// ssrunCheckout returns the absolute path of dir after checking that it is
// the root of the ssrun module.
func ssrunCheckout(dir string) (string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("--ssrun %s: %w", dir, err)
	}
	b, err := readConfigFile(filepath.Join(abs, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("--ssrun %s: not an ssrun checkout: %w", dir, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	if strings.TrimSpace(first) != "module "+ssrunModule {
		return "", fmt.Errorf("--ssrun %s: not an ssrun checkout: its go.mod is not module %s", dir, ssrunModule)
	}
	return abs, nil
}

// renderScaffold executes the templates of files for sc.
func renderScaffold(sc scaffold, files []scaffoldFile) ([][]byte, error) {
	base, err := template.New("").Delims("[[", "]]").Option("missingkey=error").ParseFS(newTemplates, "newtemplates/gomod-note.tmpl")
	if err != nil {
		return nil, fmt.Errorf("new: templates: %w", err)
	}
	out := make([][]byte, len(files))
	for i, f := range files {
		src, err := newTemplates.ReadFile(path.Join("newtemplates", f.tmpl+".tmpl"))
		if err != nil {
			return nil, fmt.Errorf("new: templates: %w", err)
		}
		t, err := template.Must(base.Clone()).Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("new: template %s: %w", f.tmpl, err)
		}
		var buf bytes.Buffer
		if err := t.Execute(&buf, sc); err != nil {
			return nil, fmt.Errorf("new: template %s: %w", f.tmpl, err)
		}
		out[i] = buf.Bytes()
	}
	return out, nil
}

// writeNew creates the file p (and its folders) with b, failing if it
// exists.
func writeNew(p string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
