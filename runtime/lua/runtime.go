package lua

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"weak"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/ssrun/ssrun/abi"
)

// Kind is the runtime's name, returned by Runtime.Kind.
const Kind = "lua"

// Defaults for zero Config fields, and the fixed compile limits.
const (
	// DefaultCallStackSize bounds Lua call depth (Lua 5.1's C limit is also 200).
	DefaultCallStackSize = 200
	// DefaultRegistrySize is the initial value stack of a state, in slots
	// of 16 bytes (16 KiB).
	DefaultRegistrySize = 1024
	// DefaultRegistryMaxSize caps the value stack (1 MiB).
	DefaultRegistryMaxSize = 64 * 1024

	// MaxSourceBytes caps a rule's source text.
	MaxSourceBytes = 1 << 20
	// MaxSyntaxDepth caps the nesting of brackets and blocks in a rule, as
	// Lua 5.1 does ("chunk has too many syntax levels"). gopher-lua's
	// compiler recurses per level (a deep enough nest overflows the Go
	// stack, which kills the process) and is quadratic in nested blocks.
	MaxSyntaxDepth = 200
)

// ErrClosed is returned by calls on a closed Runtime or Script.
var ErrClosed = errors.New("lua: closed")

// Config configure a Runtime. The zero value selects the defaults above.
type Config struct {
	// CallStackSize bounds Lua call depth: deeper recursion raises the Lua
	// error "stack overflow". Default DefaultCallStackSize.
	CallStackSize int
	// RegistrySize is the initial size, in slots, of each state's value
	// stack (locals, arguments and results of active calls). Default
	// DefaultRegistrySize.
	RegistrySize int
	// RegistryMaxSize is how far the value stack may grow; beyond it Lua
	// raises "registry overflow" (e.g. unpack of a huge table). Default
	// DefaultRegistryMaxSize. gopher-lua bug #282 (a vararg recursion that
	// overflows the registry panics inside the error handler) takes time
	// quadratic in this size to trigger: 3-5 s at the default, so the
	// default CallTimeout usually stops it first; either way the Script
	// survives (see Script).
	RegistryMaxSize int
	// Rand, when set, is called with the script's host each time a
	// script's state is built (at Start, and again when a failure forced
	// a rebuild); math.random then draws from the generator it returns
	// (used by that state alone), so a test can seed it. Unset, or when
	// it returns nil, math.random draws from Go's process-wide source.
	Rand func(h abi.Host) *rand.Rand
}

func (o Config) withDefaults() Config {
	if o.CallStackSize <= 0 {
		o.CallStackSize = DefaultCallStackSize
	}
	if o.RegistrySize <= 0 {
		o.RegistrySize = DefaultRegistrySize
	}
	o.RegistrySize = max(o.RegistrySize, 128) // gopher-lua ignores smaller sizes
	if o.RegistryMaxSize <= 0 {
		o.RegistryMaxSize = DefaultRegistryMaxSize
	}
	if o.RegistryMaxSize < o.RegistrySize {
		o.RegistryMaxSize = o.RegistrySize
	}
	return o
}

// Runtime compiles and runs Lua rules. It implements abi.Runtime and is safe
// for concurrent use.
type Runtime struct {
	opts Config

	mu     sync.Mutex
	closed bool
	// cache maps a rule's name and source to its compiled chunk while any
	// Program still uses it (a weak pointer: recompiling an unchanged rule
	// on reload is free, and replaced versions are not kept).
	cache map[[sha256.Size]byte]weak.Pointer[glua.FunctionProto]
}

var _ abi.Runtime = (*Runtime)(nil)

// New returns a Runtime.
func New(opts Config) *Runtime {
	return &Runtime{opts: opts.withDefaults(), cache: map[[sha256.Size]byte]weak.Pointer[glua.FunctionProto]{}}
}

// Kind returns "lua".
func (r *Runtime) Kind() string { return Kind }

// Close marks the runtime closed; later Compile calls fail with ErrClosed.
// Programs and Scripts hold no runtime resources and keep working.
func (r *Runtime) Close(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

// Compile parses and compiles the rule named name (its file path) once; the
// compiled chunk is shared read-only by every Script started from it. Syntax
// errors are *abi.CompileError values with the line.
func (r *Runtime) Compile(ctx context.Context, name string, src []byte) (abi.Program, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lua: compile %s: %w", name, err)
	}
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("lua: compile %s: %w", name, ErrClosed)
	}
	proto, err := r.proto(name, src)
	if err != nil {
		return nil, err
	}
	return &program{opts: r.opts, name: name, proto: proto}, nil
}

// proto returns the compiled chunk of src, from the cache when possible.
func (r *Runtime) proto(name string, src []byte) (*glua.FunctionProto, error) {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0}) // the name is in every error message of the chunk: part of the key
	h.Write(src)
	var key [sha256.Size]byte
	h.Sum(key[:0])

	r.mu.Lock()
	p := r.cache[key].Value()
	r.mu.Unlock()
	if p != nil {
		return p, nil
	}
	p, err := compile(name, src)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if q := r.cache[key].Value(); q != nil {
		return q, nil // compiled concurrently; share one
	}
	r.cache[key] = weak.Make(p)
	runtime.AddCleanup(p, r.evict, key)
	return p, nil
}

// evict drops a cache entry whose chunk was collected.
func (r *Runtime) evict(key [sha256.Size]byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if wp, ok := r.cache[key]; ok && wp.Value() == nil {
		delete(r.cache, key)
	}
}

// cached reports how many compiled chunks the cache holds (for tests).
func (r *Runtime) cached() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.cache)
}

// compile parses src, rewrites its .. chains (see concat.go) and compiles
// it, turning every failure into an *abi.CompileError. The result is the
// wrapper wrapChunk makes: state.mainFunction makes the rule's main
// function from it.
func compile(name string, src []byte) (proto *glua.FunctionProto, err error) {
	defer func() {
		if rcv := recover(); rcv != nil { // a gopher-lua bug; never take the host down
			proto, err = nil, &abi.CompileError{File: name, Msg: fmt.Sprintf("compiler failed: %v", rcv)}
		}
	}()
	if layoutErr != nil {
		return nil, &abi.CompileError{File: name, Msg: layoutErr.Error()}
	}
	if len(src) > MaxSourceBytes {
		return nil, &abi.CompileError{File: name, Msg: fmt.Sprintf("source is %d bytes, more than the limit of %d", len(src), MaxSourceBytes)}
	}
	if err := checkDepth(name, src); err != nil {
		return nil, compileError(name, src, err)
	}
	chunk, err := parse.Parse(bytes.NewReader(src), name)
	if err != nil {
		return nil, compileError(name, src, err)
	}
	if err := vetModuleCalls(name, chunk); err != nil {
		return nil, err
	}
	proto, err = glua.Compile(wrapChunk(chunk), name)
	if err != nil {
		return nil, compileError(name, src, err)
	}
	trim(proto)
	return proto, nil
}

// trim drops the spare capacity gopher-lua's compiler leaves in a proto's
// slices (a 2.7 KB rule held room for 13,312 instructions in 340 used,
// ~180 KB), so a cached program costs what it holds.
func trim(p *glua.FunctionProto) {
	p.Code = slices.Clip(slices.Clone(p.Code))
	p.Constants = slices.Clip(slices.Clone(p.Constants))
	p.DbgSourcePositions = slices.Clip(slices.Clone(p.DbgSourcePositions))
	p.DbgLocals = slices.Clip(slices.Clone(p.DbgLocals))
	p.DbgCalls = slices.Clip(slices.Clone(p.DbgCalls))
	p.DbgUpvalues = slices.Clip(slices.Clone(p.DbgUpvalues))
	p.FunctionPrototypes = slices.Clip(slices.Clone(p.FunctionPrototypes))
	for _, c := range p.FunctionPrototypes {
		trim(c)
	}
}

// checkDepth fails when brackets and blocks nest deeper than MaxSyntaxDepth.
func checkDepth(name string, src []byte) error {
	sc := parse.NewScanner(bytes.NewReader(src), name)
	lx := &parse.Lexer{}
	depth := 0
	for {
		lx.PrevTokenType = lx.Token.Type
		tok, err := sc.Scan(lx)
		if pe, ok := err.(*parse.Error); ok {
			pe.Pos.Line = tok.Pos.Line // where the token starts, not where the scanner gave up
		}
		if err != nil {
			return err
		}
		if tok.Type < 0 {
			return nil
		}
		lx.Token = tok
		switch tok.Type {
		case '(', '[', '{', parse.TFunction, parse.TDo, parse.TIf, parse.TRepeat:
			if depth++; depth > MaxSyntaxDepth {
				return &parse.Error{Pos: tok.Pos, Message: fmt.Sprintf("chunk has too many syntax levels (more than %d)", MaxSyntaxDepth), Token: tok.Str}
			}
		case ')', ']', '}', parse.TEnd, parse.TUntil:
			depth--
		}
	}
}

// compileError converts a gopher-lua parse or compile error.
func compileError(name string, src []byte, err error) *abi.CompileError {
	var pe *parse.Error
	if errors.As(err, &pe) {
		if pe.Pos.Line == parse.EOF {
			return &abi.CompileError{File: name, Line: bytes.Count(src, []byte{'\n'}) + 1, Msg: pe.Message + " near <eof>"}
		}
		return &abi.CompileError{File: name, Line: pe.Pos.Line, Msg: fmt.Sprintf("%s near '%s'", pe.Message, pe.Token)}
	}
	var ce *glua.CompileError
	if errors.As(err, &ce) {
		line := ce.Line
		// "no visible label 'x' for <goto> at line 3" is reported at the
		// end of the function; the goto's line is in the message.
		if _, after, ok := strings.Cut(ce.Message, " at line "); ok {
			if n, err := strconv.Atoi(after); err == nil {
				line = n
			}
		}
		return &abi.CompileError{File: name, Line: line, Msg: ce.Message}
	}
	return &abi.CompileError{File: name, Msg: err.Error()}
}

// program is a compiled rule.
type program struct {
	opts  Config
	name  string
	proto *glua.FunctionProto
}

// Start builds a sandboxed state bound to h and runs the rule's top-level
// chunk under lim, during which the rule declares its watches. A rule that
// raises an error while loading, or defines no global function on_event,
// fails here with an *Error naming file and line.
func (p *program) Start(ctx context.Context, h abi.Host, lim abi.Limits) (abi.Script, error) {
	s := &script{prog: p, host: h, lim: lim.WithDefaults()}
	if err := s.load(ctx); err != nil {
		return nil, err
	}
	return s, nil
}
