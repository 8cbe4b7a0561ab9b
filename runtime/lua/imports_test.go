package lua

import (
	"go/parser"
	"go/token"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestImports keeps the package on its side of the layering: the standard
// library, abi and gopher-lua only (never protocol, host or another runtime).
func TestImports(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			stdlib := !strings.Contains(strings.Split(path, "/")[0], ".")
			if !stdlib && path != "github.com/ssrun/ssrun/abi" && !strings.HasPrefix(path, "github.com/yuin/gopher-lua") {
				t.Errorf("%s imports %s", name, path)
			}
		}
	}
}
