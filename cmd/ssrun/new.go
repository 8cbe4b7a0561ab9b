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

	"github.com/ssrun/ssrun/abi/guest/assemblyscript"
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
	Replace   string // the ssrun checkout go.mod replaces the module with, relative to the project; "" for none
	Checkout  string // the checkout's absolute path, when Replace or SDK lead there
	SDK       string // the AssemblyScript guest SDK, relative to the project, with slashes
	SDKCopy   bool   // SDK is a copy of this ssrun's, in the project
}

// SDKPath is SDK as a path asc resolves relative to the project (not as a
// module name): it starts with ./ or ../.
func (sc scaffold) SDKPath() string {
	if strings.HasPrefix(sc.SDK, "../") {
		return sc.SDK
	}
	return "./" + sc.SDK
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
version. A development build of ssrun has none: go.mod then replaces the
module with the ssrun checkout, by a path relative to the scaffold (so the
folder can be committed), the checkout given with --ssrun CHECKOUT or, by
default, the one the current folder is in. --ssrun CHECKOUT also overrides
a version. The AssemblyScript guest SDK is not on npm: assemblyscript copies
this ssrun's SDK into NAME/ssrun-sdk/, or with --ssrun uses the checkout's
by relative path. The command says which. Existing files are never
overwritten.`,
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
	how, err := sc.module(kind, root, checkout)
	if err != nil {
		return usageError("new %s %s: %v", kind, name, err)
	}
	if sc.SDKCopy {
		sdk, err := sdkFiles()
		if err != nil {
			return err
		}
		files = append(files, sdk...)
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
	if how != "" {
		fmt.Fprintln(a.stdout, how)
	}
	return nil
}

// sdkCopyDir is the folder of an AssemblyScript scaffold that holds its
// copy of the SDK.
const sdkCopyDir = "ssrun-sdk"

// sdkFiles lists this ssrun's AssemblyScript SDK, to copy into the
// scaffold's sdkCopyDir.
func sdkFiles() ([]scaffoldFile, error) {
	var out []scaffoldFile
	err := fs.WalkDir(assemblyscript.SDK, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, scaffoldFile{tmpl: rawPrefix + p, dst: sdkCopyDir + "/" + p})
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("new: the AssemblyScript SDK: %w", err)
	}
	return out, nil
}

// module sets what a kind needs of the ssrun module: for go and plugin,
// the version go.mod requires or the checkout it replaces it with (by a
// path relative to the project), for assemblyscript the SDK's path from the
// project folder root (a copy of this ssrun's, or the checkout's). It
// returns the line that tells the user which.
func (sc *scaffold) module(kind, root, checkout string) (string, error) {
	if kind == "lua" {
		return "", nil
	}
	proj, err := filepath.Abs(root)
	if err != nil {
		return "", err
	}
	if kind == "assemblyscript" {
		if checkout == "" {
			sc.SDK, sc.SDKCopy = sdkCopyDir, true
			return fmt.Sprintf("the AssemblyScript SDK is a copy of this ssrun's (%s), in %s: the folder builds on its own", versionWord(), filepath.Join(root, sdkCopyDir)), nil
		}
		abs, err := ssrunCheckout(checkout)
		if err != nil {
			return "", err
		}
		rel, err := filepath.Rel(proj, filepath.Join(abs, "abi", "guest", "assemblyscript"))
		if err != nil {
			return "", fmt.Errorf("--ssrun %s: %w", checkout, err)
		}
		sc.SDK, sc.Checkout = filepath.ToSlash(rel), abs
		return fmt.Sprintf("the AssemblyScript SDK is the checkout %s's, by the relative path %s (keep the folders where they are to each other)", abs, sc.SDK), nil
	}
	if checkout == "" {
		bi, ok := debug.ReadBuildInfo()
		if ok {
			if v, err := requiredVersion(bi); err == nil {
				sc.Version = v
				return fmt.Sprintf("go.mod requires %s %s, this ssrun's version", ssrunModule, v), nil
			}
		}
		found, err := checkoutAround()
		if err != nil {
			return "", errors.New("this ssrun is a development build, with no module version go.mod can require, and the current folder is in no ssrun checkout: give --ssrun PATH, the root of the ssrun checkout to build against")
		}
		checkout = found
	}
	abs, err := ssrunCheckout(checkout)
	if err != nil {
		return "", err
	}
	rel, err := filepath.Rel(proj, abs)
	if err != nil {
		return "", fmt.Errorf("--ssrun %s: %w", checkout, err)
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel // a relative replace path must start with ./ or ../
	}
	sc.Replace, sc.Version, sc.Checkout = rel, replacedVersion, abs
	return fmt.Sprintf("go.mod replaces %s with the checkout %s, by the relative path %s (keep the folders where they are to each other)", ssrunModule, abs, rel), nil
}

// versionWord names this ssrun's version for the user.
func versionWord() string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v, err := requiredVersion(bi); err == nil {
			return v
		}
	}
	return "a development build"
}

// checkoutAround returns the ssrun checkout the current folder is in: the
// nearest folder up from it whose go.mod is the ssrun module's.
func checkoutAround() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := ssrunCheckout(dir); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no ssrun checkout around the current folder")
		}
		dir = up
	}
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

// rawPrefix marks a scaffoldFile whose tmpl is a file of the embedded
// AssemblyScript SDK, written as it is.
const rawPrefix = "sdk:"

// renderScaffold executes the templates of files for sc.
func renderScaffold(sc scaffold, files []scaffoldFile) ([][]byte, error) {
	base, err := template.New("").Delims("[[", "]]").Option("missingkey=error").ParseFS(newTemplates, "newtemplates/gomod-note.tmpl")
	if err != nil {
		return nil, fmt.Errorf("new: templates: %w", err)
	}
	out := make([][]byte, len(files))
	for i, f := range files {
		if raw, ok := strings.CutPrefix(f.tmpl, rawPrefix); ok {
			if out[i], err = fs.ReadFile(assemblyscript.SDK, raw); err != nil {
				return nil, fmt.Errorf("new: the AssemblyScript SDK: %w", err)
			}
			continue
		}
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
