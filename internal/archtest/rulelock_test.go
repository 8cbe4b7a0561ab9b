package archtest

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The host's rule keeps its state under one lock, rule.mu, that only
// host/rule.go takes (host/doc.go): every other file asks the rule through
// its methods, so the lock's critical sections can be read in one file.

// ruleLockUses type-checks files, the Go files of one package, and returns
// the uses of the field mu of its struct type rule: those in the file
// owner (by base name) and, as "file:line: what", those elsewhere. The
// package's imports are not read: each is an empty package, so only the
// package's own types resolve, which is all the check needs; the errors
// that leaves are ignored.
func ruleLockUses(fset *token.FileSet, files []*ast.File, owner string) (inOwner int, outside []string) {
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}}
	conf := types.Config{
		Importer: emptyImporter{},
		Error:    func(error) {}, // unresolved imports
	}
	pkg, _ := conf.Check("host", fset, files, info)
	obj := pkg.Scope().Lookup("rule")
	if obj == nil {
		return 0, []string{"no type rule declared"}
	}
	ruleType := obj.Type()
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "mu" {
				return true
			}
			s := info.Selections[sel]
			if s == nil || s.Kind() != types.FieldVal {
				return true
			}
			recv := s.Recv()
			if p, ok := recv.(*types.Pointer); ok {
				recv = p.Elem()
			}
			if !types.Identical(recv, ruleType) {
				return true
			}
			pos := fset.Position(sel.Pos())
			if filepath.Base(pos.Filename) == owner {
				inOwner++
				return true
			}
			outside = append(outside, fmt.Sprintf("%s:%d: %s", filepath.Base(pos.Filename), pos.Line, types.ExprString(sel)))
			return true
		})
	}
	return inOwner, outside
}

// emptyImporter imports every package as an empty one.
type emptyImporter struct{}

func (emptyImporter) Import(p string) (*types.Package, error) {
	pkg := types.NewPackage(p, path.Base(p))
	pkg.MarkComplete()
	return pkg, nil
}

// parseFiles parses the named sources (name -> text), or the files of
// paths when sources is nil.
func parseFiles(t *testing.T, fset *token.FileSet, paths []string, sources map[string]string) []*ast.File {
	t.Helper()
	var files []*ast.File
	if sources != nil {
		for _, name := range slices.Sorted(func(yield func(string) bool) {
			for k := range sources {
				if !yield(k) {
					return
				}
			}
		}) {
			f, err := parser.ParseFile(fset, name, sources[name], parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		return files
	}
	for _, p := range paths {
		f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// TestOnlyRuleGoTakesTheRuleLock checks host/doc.go's word: only rule.go
// takes (or touches) rule.mu.
func TestOnlyRuleGoTakesTheRuleLock(t *testing.T) {
	all, err := filepath.Glob("../../host/*.go")
	if err != nil {
		t.Fatal(err)
	}
	paths := slices.DeleteFunc(all, func(p string) bool { return strings.HasSuffix(p, "_test.go") })
	if len(paths) < 10 {
		t.Fatalf("found only %d files in host/", len(paths))
	}
	fset := token.NewFileSet()
	inOwner, outside := ruleLockUses(fset, parseFiles(t, fset, paths, nil), "rule.go")
	for _, v := range outside {
		t.Errorf("host/%s: rule.mu used outside rule.go (host/doc.go: only rule.go takes the rule's lock; add a rule method)", v)
	}
	if inOwner == 0 { // the check found nothing at all: it is broken
		t.Fatal("no use of rule.mu found in rule.go")
	}
}

// TestRuleLockCheckFindsAViolation runs the check on a synthetic package
// that takes the rule's lock outside rule.go, directly and through a
// field, next to other types' locks named mu held by variables named r.
func TestRuleLockCheckFindsAViolation(t *testing.T) {
	sources := map[string]string{
		"rule.go": `package host

import "sync"

type rule struct {
	mu sync.Mutex
	n  int
}

func (r *rule) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n
}
`,
		"binding.go": `package host

import "sync"

type binding struct{ r *rule }

type other struct{ mu sync.Mutex }

func (b *binding) peek() int {
	b.r.mu.Lock()
	defer b.r.mu.Unlock()
	return b.r.n
}

func fine(r *other, x *rule) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return x.count()
}

func reset(r rule) {
	r.mu.TryLock()
}
`,
	}
	fset := token.NewFileSet()
	inOwner, outside := ruleLockUses(fset, parseFiles(t, fset, nil, sources), "rule.go")
	want := []string{"binding.go:10: b.r.mu", "binding.go:11: b.r.mu", "binding.go:22: r.mu"}
	if !slices.Equal(outside, want) || inOwner != 2 {
		t.Fatalf("violations = %q and %d uses in rule.go, want %q and 2", outside, inOwner, want)
	}
}
