package lua

import (
	"fmt"
	"strings"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
)

// The .. operator compiles to gopher-lua's OP_CONCAT, which joins all its
// operands in one allocation inside the VM, where nothing can size or stop
// it: `a..a..` with 20 operands of 60 MiB built 1.2 GB. So Compile rewrites
// the parsed chunk before compiling it: every chain of .. becomes a call of
// the state's concat builtin with the same operands, in the same order, on
// the same line; concat joins them exactly as OP_CONCAT does (runs of
// strings and numbers at once, __concat metamethods pairwise from the
// right, the same error messages) after reserving the size of each join in
// the rule's memory account.
//
// The builtin reaches the rule's code through a local of an enclosing
// function named concatName, which is not a Lua identifier: the rule can
// neither name, read nor replace it. wrapChunk makes the chunk
//
//	local (concat)
//	return function(...) <the rule, rewritten> end
//
// and the rule's main function is the inner one (prototype 0 of the
// compiled wrapper), made with its single upvalue set to the state's
// concat (state.mainFunction). Nothing else changes: it is vararg and gets
// no arguments, as a main chunk; its code, lines and locals are the rule's.

// concatName names the concat builtin inside a rewritten chunk.
const concatName = "(concat)"

// wrapChunk returns chunk, rewritten, as the body of a function declared
// after a local named concatName (see above). It rewrites chunk in place.
func wrapChunk(chunk []ast.Stmt) []ast.Stmt {
	mapStmts(chunk, concatCall)
	main := &ast.FunctionExpr{ParList: &ast.ParList{HasVargs: true, Names: []string{}}, Stmts: chunk}
	if len(chunk) > 0 { // as glua.Compile marks the main chunk's end
		main.SetLastLine(lastLine(chunk[len(chunk)-1]) + 1)
	}
	decl := &ast.LocalAssignStmt{Names: []string{concatName}, Exprs: []ast.Expr{}}
	return []ast.Stmt{decl, &ast.ReturnStmt{Exprs: []ast.Expr{main}}}
}

func lastLine(n ast.PositionHolder) int {
	if l := n.LastLine(); l != 0 {
		return l
	}
	return n.Line()
}

// concatCall returns the call of concatName that replaces e if e is a ..
// chain, else e.
func concatCall(e ast.Expr) ast.Expr {
	c, ok := e.(*ast.StringConcatOpExpr)
	if !ok {
		return e
	}
	// a .. b .. c parses as a .. (b .. c); OP_CONCAT takes the operands
	// along the right spine, the left one of each link as an expression of
	// its own (compileStringConcatOpExpr).
	var args []ast.Expr
	var link ast.Expr = c
	for {
		l, ok := link.(*ast.StringConcatOpExpr)
		if !ok {
			args = append(args, link)
			break
		}
		args = append(args, l.Lhs)
		link = l.Rhs
	}
	// An operand is one value, as in OP_CONCAT; as the last argument of a
	// call, f() and ... would pass all theirs.
	switch last := args[len(args)-1].(type) {
	case *ast.FuncCallExpr:
		last.AdjustRet = true
	case *ast.Comma3Expr:
		last.AdjustRet = true
	}
	fn := &ast.IdentExpr{Value: concatName}
	fn.SetLine(c.Line())
	fn.SetLastLine(c.Line())
	// AdjustRet: one result, and never a tail call (which would drop the
	// rule's frame from tracebacks).
	call := &ast.FuncCallExpr{Func: fn, Args: args, AdjustRet: true}
	call.SetLine(c.Line())
	call.SetLastLine(c.LastLine())
	return call
}

// mapStmts replaces every expression e in stmts, at any depth, by f(e),
// outermost first: f's result is walked, not e.
func mapStmts(stmts []ast.Stmt, f func(ast.Expr) ast.Expr) {
	for _, s := range stmts {
		mapStmt(s, f)
	}
}

func mapExprs(exprs []ast.Expr, f func(ast.Expr) ast.Expr) {
	for i, e := range exprs {
		exprs[i] = mapExpr(e, f)
	}
}

func mapStmt(s ast.Stmt, f func(ast.Expr) ast.Expr) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		mapExprs(s.Lhs, f)
		mapExprs(s.Rhs, f)
	case *ast.LocalAssignStmt:
		mapExprs(s.Exprs, f)
	case *ast.FuncCallStmt:
		s.Expr = mapExpr(s.Expr, f)
	case *ast.DoBlockStmt:
		mapStmts(s.Stmts, f)
	case *ast.WhileStmt:
		s.Condition = mapExpr(s.Condition, f)
		mapStmts(s.Stmts, f)
	case *ast.RepeatStmt:
		mapStmts(s.Stmts, f)
		s.Condition = mapExpr(s.Condition, f)
	case *ast.IfStmt:
		s.Condition = mapExpr(s.Condition, f)
		mapStmts(s.Then, f)
		mapStmts(s.Else, f)
	case *ast.NumberForStmt:
		mapEach(f, &s.Init, &s.Limit, &s.Step)
		mapStmts(s.Stmts, f)
	case *ast.GenericForStmt:
		mapExprs(s.Exprs, f)
		mapStmts(s.Stmts, f)
	case *ast.FuncDefStmt:
		if s.Name != nil {
			mapEach(f, &s.Name.Func, &s.Name.Receiver)
		}
		mapStmts(s.Func.Stmts, f)
	case *ast.ReturnStmt:
		mapExprs(s.Exprs, f)
	case *ast.BreakStmt, *ast.LabelStmt, *ast.GotoStmt:
	default:
		// A statement this walk does not know could hide a `..`: refuse to
		// compile (compile turns the panic into an error).
		panic(fmt.Sprintf("unknown statement %T", s))
	}
}

// mapExpr returns f(e) with its subexpressions mapped; e may be nil.
func mapExpr(e ast.Expr, f func(ast.Expr) ast.Expr) ast.Expr {
	if e == nil {
		return nil
	}
	e = f(e)
	switch e := e.(type) {
	case *ast.AttrGetExpr:
		mapEach(f, &e.Object, &e.Key)
	case *ast.TableExpr:
		for _, fl := range e.Fields {
			mapEach(f, &fl.Key, &fl.Value)
		}
	case *ast.FuncCallExpr:
		mapEach(f, &e.Func, &e.Receiver)
		mapExprs(e.Args, f)
	case *ast.LogicalOpExpr:
		mapEach(f, &e.Lhs, &e.Rhs)
	case *ast.RelationalOpExpr:
		mapEach(f, &e.Lhs, &e.Rhs)
	case *ast.ArithmeticOpExpr:
		mapEach(f, &e.Lhs, &e.Rhs)
	case *ast.StringConcatOpExpr:
		mapEach(f, &e.Lhs, &e.Rhs)
	case *ast.UnaryMinusOpExpr:
		mapEach(f, &e.Expr)
	case *ast.UnaryNotOpExpr:
		mapEach(f, &e.Expr)
	case *ast.UnaryLenOpExpr:
		mapEach(f, &e.Expr)
	case *ast.FunctionExpr:
		mapStmts(e.Stmts, f)
	case *ast.IdentExpr, *ast.Comma3Expr, *ast.NilExpr, *ast.TrueExpr, *ast.FalseExpr, *ast.NumberExpr, *ast.StringExpr:
	default:
		panic(fmt.Sprintf("unknown expression %T", e))
	}
	return e
}

// mapEach maps each expression in place.
func mapEach(f func(ast.Expr) ast.Expr, exprs ...*ast.Expr) {
	for _, e := range exprs {
		*e = mapExpr(*e, f)
	}
}

// mainFunction returns the rule's main function from the compiled wrapper
// (see wrapChunk), bound to st's concat builtin.
func (st *state) mainFunction(wrapper *glua.FunctionProto) *glua.LFunction {
	fn := st.L.NewFunctionFromProto(wrapper.FunctionPrototypes[0])
	for i := range fn.Upvalues { // the only possible upvalue is concatName
		fn.Upvalues[i] = &glua.Upvalue{}
		fn.Upvalues[i].SetValue(st.concatFn)
	}
	return fn
}

// concat is the builtin every .. chain calls, with the chain's operands as
// arguments (at least two). It does what gopher-lua's OP_CONCAT does
// (stringConcat in vm.go), from the right: a run of strings and numbers is
// joined at once, into a string whose size is reserved first; any other
// pair goes to the __concat metamethod of its left operand, else its right
// one.
func (st *state) concat(L *glua.LState) int {
	n := L.GetTop()
	rhs := L.Get(n)
	for i := n - 1; i >= 1; {
		lhs := L.Get(i)
		if !glua.LVCanConvToString(lhs) || !glua.LVCanConvToString(rhs) {
			op := L.GetMetaField(lhs, "__concat")
			if op == glua.LNil {
				op = L.GetMetaField(rhs, "__concat")
			}
			if op.Type() != glua.LTFunction {
				L.RaiseError("cannot perform concat operation between %v and %v", lhs.Type().String(), rhs.Type().String())
			}
			L.Push(op)
			L.Push(lhs)
			L.Push(rhs)
			L.Call(2, 1)
			rhs = L.Get(-1)
			L.Pop(1)
			i--
			continue
		}
		first := i // the run is L.Get(first..i) and rhs
		for first > 1 && glua.LVCanConvToString(L.Get(first-1)) {
			first--
		}
		parts := make([]string, 0, i-first+2)
		size := int64(0)
		for k := first; k <= i; k++ {
			s := glua.LVAsString(L.Get(k))
			parts = append(parts, s)
			size += int64(len(s))
		}
		last := glua.LVAsString(rhs)
		parts = append(parts, last)
		size += int64(len(last))
		st.reserve(L, "the .. operator", size)
		rhs = glua.LString(strings.Join(parts, ""))
		i = first - 1
	}
	L.Push(rhs)
	return 1
}
