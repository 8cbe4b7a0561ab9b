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

// The package's files form layers (doc.go): no file uses a declaration of a
// file that uses one of its own, directly or not. An arrow A -> B means A
// uses a type, function, variable, constant, method or field declared in B.
func TestFileLayers(t *testing.T) {
	arrows := fileArrows(t)
	next := map[string][]string{}
	for a := range arrows {
		next[a[0]] = append(next[a[0]], a[1])
	}
	reaches := func(from, to string) bool {
		seen := map[string]bool{from: true}
		for q := []string{from}; len(q) > 0; q = q[1:] {
			if q[0] == to {
				return true
			}
			for _, n := range next[q[0]] {
				if !seen[n] {
					seen[n] = true
					q = append(q, n)
				}
			}
		}
		return false
	}
	var back []string
	for a, names := range arrows {
		if reaches(a[1], a[0]) {
			slices.Sort(names)
			back = append(back, fmt.Sprintf("%s -> %s (%s)", a[0], a[1], strings.Join(names, " ")))
		}
	}
	slices.Sort(back)
	if len(back) > 0 {
		t.Fatalf("arrows in a cycle between the package's files:\n%s", strings.Join(back, "\n"))
	}
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
