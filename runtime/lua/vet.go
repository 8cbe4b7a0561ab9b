package lua

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/yuin/gopher-lua/ast"

	"github.com/ssrun/ssrun/abi"
)

// A rule that calls a function the ssrun module does not have (ss.sett for
// ss.set) fails only when the call runs, which for a call in on_event is at
// some event in production. vetModuleCalls finds such calls in the parsed
// chunk so that Compile refuses the rule, naming the line.
//
// What it sees: calls ss.name(...) and ss:name(...) where ss is a local
// (or global) the chunk assigned require("ssrun"), at any depth, respecting
// Lua's scopes (a parameter, local or loop variable of the same name hides
// the module), and require("ssrun").name(...).
//
// What it leaves alone, so that it never refuses a rule that can run:
//   - a name the rule assigns to the module itself (function ss.helper());
//   - a name the rule also reads without calling it, which is how a rule
//     tests for a function before calling it (if ss.future then ... end);
//   - the module reached any other way (passed to a function, stored in a
//     table, reassigned through another variable), and fields of its
//     sub-tables (ss.json, ss.status).

// moduleNames returns the fields of the ssrun module (newModule), sorted.
func moduleNames() []string {
	names := append(abi.Verbs(), "status", "json")
	names = append(names, slices.Collect(maps.Keys(logLevels))...)
	slices.Sort(names)
	return names
}

// moduleCall is a call of a field of the module.
type moduleCall struct {
	call string // as written: "ss.sett", "ss:nope"
	name string
	line int
}

// vet walks a chunk, tracking which names hold the module.
type vet struct {
	scopes   []map[string]bool // innermost last: local name -> holds the module
	globals  map[string]bool   // global name -> holds the module
	assigned map[string]bool   // fields the rule sets on the module
	read     map[string]bool   // fields read other than as a callee
	calls    []moduleCall
}

// vetModuleCalls returns an *abi.CompileError for the first call (in source
// order) of a function the ssrun module does not have, or nil.
func vetModuleCalls(name string, chunk []ast.Stmt) error {
	v := &vet{globals: map[string]bool{}, assigned: map[string]bool{}, read: map[string]bool{}}
	v.block(chunk)
	known := moduleNames()
	for _, c := range v.calls {
		if slices.Contains(known, c.name) || v.assigned[c.name] || v.read[c.name] {
			continue
		}
		return &abi.CompileError{File: name, Line: c.line, Msg: fmt.Sprintf(
			"%s: the ssrun module has no function %q (it has %s)", c.call, c.name, strings.Join(known, ", "))}
	}
	return nil
}

// block walks stmts in a scope of their own.
func (v *vet) block(stmts []ast.Stmt, locals ...string) {
	v.scopes = append(v.scopes, map[string]bool{})
	for _, n := range locals {
		v.declare(n, false)
	}
	v.stmts(stmts)
	v.scopes = v.scopes[:len(v.scopes)-1]
}

func (v *vet) declare(name string, module bool) { v.scopes[len(v.scopes)-1][name] = module }

func (v *vet) stmts(stmts []ast.Stmt) {
	for _, s := range stmts {
		v.stmt(s)
	}
}

func (v *vet) stmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.LocalAssignStmt:
		v.exprs(s.Exprs)
		for i, n := range s.Names {
			v.declare(n, i < len(s.Exprs) && v.isModule(s.Exprs[i]))
		}
	case *ast.AssignStmt:
		v.exprs(s.Rhs)
		for i, lhs := range s.Lhs {
			v.assign(lhs, i < len(s.Rhs) && v.isModule(s.Rhs[i]))
		}
	case *ast.FuncCallStmt:
		v.expr(s.Expr)
	case *ast.DoBlockStmt:
		v.block(s.Stmts)
	case *ast.WhileStmt:
		v.expr(s.Condition)
		v.block(s.Stmts)
	case *ast.RepeatStmt:
		v.block(append(slices.Clip(s.Stmts), &ast.FuncCallStmt{Expr: s.Condition})) // the condition sees the body's locals
	case *ast.IfStmt:
		v.expr(s.Condition)
		v.block(s.Then)
		v.block(s.Else)
	case *ast.NumberForStmt:
		v.exprs([]ast.Expr{s.Init, s.Limit, s.Step})
		v.block(s.Stmts, s.Name)
	case *ast.GenericForStmt:
		v.exprs(s.Exprs)
		v.block(s.Stmts, s.Names...)
	case *ast.FuncDefStmt:
		if s.Name.Receiver != nil { // function obj:m()
			if v.isModule(s.Name.Receiver) {
				v.assigned[s.Name.Method] = true
			}
			v.expr(s.Name.Receiver)
			v.function(s.Func, "self")
			return
		}
		v.assign(s.Name.Func, false)
		v.function(s.Func)
	case *ast.ReturnStmt:
		v.exprs(s.Exprs)
	}
}

// assign notes an assignment to lhs; module tells whether the value is the
// module.
func (v *vet) assign(lhs ast.Expr, module bool) {
	switch e := lhs.(type) {
	case *ast.IdentExpr:
		for i := len(v.scopes) - 1; i >= 0; i-- {
			if _, ok := v.scopes[i][e.Value]; ok {
				v.scopes[i][e.Value] = module
				return
			}
		}
		v.globals[e.Value] = module
	case *ast.AttrGetExpr:
		if k, ok := e.Key.(*ast.StringExpr); ok && v.isModule(e.Object) {
			v.assigned[k.Value] = true
		}
		v.expr(e.Object)
		v.expr(e.Key)
	}
}

func (v *vet) function(f *ast.FunctionExpr, implicit ...string) {
	v.block(f.Stmts, append(implicit, f.ParList.Names...)...)
}

func (v *vet) exprs(exprs []ast.Expr) {
	for _, e := range exprs {
		v.expr(e)
	}
}

func (v *vet) expr(e ast.Expr) {
	switch e := e.(type) {
	case *ast.AttrGetExpr:
		if k, ok := e.Key.(*ast.StringExpr); ok && v.isModule(e.Object) {
			v.read[k.Value] = true
		}
		v.expr(e.Object)
		v.expr(e.Key)
	case *ast.FuncCallExpr:
		switch {
		case e.Receiver != nil && v.isModule(e.Receiver):
			v.calls = append(v.calls, moduleCall{call: v.text(e.Receiver) + ":" + e.Method, name: e.Method, line: e.Line()})
		case e.Receiver != nil:
			v.expr(e.Receiver)
		default:
			if f, ok := e.Func.(*ast.AttrGetExpr); ok && v.isModule(f.Object) {
				if k, ok := f.Key.(*ast.StringExpr); ok {
					v.calls = append(v.calls, moduleCall{call: v.text(f.Object) + "." + k.Value, name: k.Value, line: e.Line()})
					v.expr(f.Object)
					break
				}
			}
			v.expr(e.Func)
		}
		v.exprs(e.Args)
	case *ast.TableExpr:
		for _, f := range e.Fields {
			v.expr(f.Key)
			v.expr(f.Value)
		}
	case *ast.LogicalOpExpr:
		v.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.RelationalOpExpr:
		v.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.ArithmeticOpExpr:
		v.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.StringConcatOpExpr:
		v.exprs([]ast.Expr{e.Lhs, e.Rhs})
	case *ast.UnaryMinusOpExpr:
		v.expr(e.Expr)
	case *ast.UnaryNotOpExpr:
		v.expr(e.Expr)
	case *ast.UnaryLenOpExpr:
		v.expr(e.Expr)
	case *ast.FunctionExpr:
		v.function(e)
	}
}

// isModule reports whether e is the ssrun module: require("ssrun"), or a
// name that holds it here.
func (v *vet) isModule(e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.IdentExpr:
		for i := len(v.scopes) - 1; i >= 0; i-- {
			if m, ok := v.scopes[i][e.Value]; ok {
				return m
			}
		}
		return v.globals[e.Value]
	case *ast.FuncCallExpr:
		f, ok := e.Func.(*ast.IdentExpr)
		if !ok || f.Value != "require" || e.Receiver != nil || len(e.Args) != 1 {
			return false
		}
		s, ok := e.Args[0].(*ast.StringExpr)
		return ok && s.Value == abi.ImportModule
	}
	return false
}

// text writes the module expression e as the rule does.
func (v *vet) text(e ast.Expr) string {
	if id, ok := e.(*ast.IdentExpr); ok {
		return id.Value
	}
	return fmt.Sprintf("require(%q)", abi.ImportModule)
}
