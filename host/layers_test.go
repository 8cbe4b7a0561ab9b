package host

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The package's files form the layers drawn in doc.go: each file uses only
// files on the lines below its own there. An arrow A -> B means A uses a
// type, function, variable, constant, method or field declared in B.
func TestFileLayers(t *testing.T) {
	layer := docLayers(t)
	var up []string
	for a, names := range fileArrows(t) {
		for _, f := range a {
			if _, ok := layer[f]; !ok {
				t.Fatalf("%s is not in the picture of the files in doc.go", f)
			}
		}
		if layer[a[1]] <= layer[a[0]] {
			slices.Sort(names)
			up = append(up, fmt.Sprintf("%s -> %s (%s)", a[0], a[1], strings.Join(names, " ")))
		}
	}
	slices.Sort(up)
	if len(up) > 0 {
		t.Fatalf("arrows that do not point down the picture in doc.go:\n%s", strings.Join(up, "\n"))
	}
}

// docLayers reads the picture of the files in doc.go: the lines of its
// indented block that start with file names, top down. It returns each
// file's line number.
func docLayers(t *testing.T) map[string]int {
	t.Helper()
	src, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	layer := map[string]int{}
	n := 0
	for line := range strings.Lines(string(src)) {
		text, ok := strings.CutPrefix(line, "//\t")
		if !ok {
			continue
		}
		named := false
		for _, w := range strings.Fields(text) {
			if !strings.HasSuffix(w, ".go") {
				break
			}
			layer[w], named = n, true
		}
		if named {
			n++
		}
	}
	if n == 0 {
		t.Fatal("doc.go draws no files")
	}
	return layer
}

// fileArrows type-checks the package's non-test files and returns its
// arrows between files with the names each uses.
func fileArrows(t *testing.T) map[[2]string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-export", "-deps", "-json=ImportPath,Export", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	exports := map[string]string{}
	for dec := json.NewDecoder(strings.NewReader(string(out))); dec.More(); {
		var p struct{ ImportPath, Export string }
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
	}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	for _, n := range names {
		if strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, n, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	conf := types.Config{Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		return os.Open(exports[path])
	})}
	info := &types.Info{Uses: map[*ast.Ident]types.Object{}}
	pkg, err := conf.Check("host", fset, files, info)
	if err != nil {
		t.Fatal(err)
	}
	arrows := map[[2]string][]string{}
	for id, obj := range info.Uses {
		if obj.Pkg() != pkg || !declaredOutsideFunctions(pkg, obj) {
			continue
		}
		a := [2]string{fset.Position(id.Pos()).Filename, fset.Position(obj.Pos()).Filename}
		if a[0] != a[1] && !slices.Contains(arrows[a], obj.Name()) {
			arrows[a] = append(arrows[a], obj.Name())
		}
	}
	return arrows
}

// declaredOutsideFunctions reports whether obj is declared at package level,
// or is a method or a struct field (not a local or a parameter).
func declaredOutsideFunctions(pkg *types.Package, obj types.Object) bool {
	switch o := obj.(type) {
	case *types.Var:
		return o.IsField() || o.Parent() == pkg.Scope()
	case *types.Func:
		return o.Signature().Recv() != nil || o.Parent() == pkg.Scope()
	case *types.TypeName, *types.Const:
		return o.Parent() == pkg.Scope()
	}
	return false
}
