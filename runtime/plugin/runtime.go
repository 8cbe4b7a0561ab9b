package plugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/runtime/plugin/internal/workdir"
)

// Config configure a Runtime. The zero value is the documented default.
type Config struct {
	// Logger receives the runtime's reports: plugin exits and restarts,
	// lost events, and go-plugin's diagnostics (at debug level), each
	// tagged with the plugin. Default slog.Default().
	Logger *slog.Logger
	// Checksums pins plugin files: file path -> SHA-256 of the file's
	// content in hex. A file listed here whose content differs fails to
	// compile; files not listed are not checked. Paths are compared after
	// filepath.Abs.
	Checksums map[string]string
	// ExecDir is the directory under which the runtime makes its working
	// directory, "ssrun-plugins-*": there it keeps the copies of the plugin
	// binaries it runs (the file in the rules folder can then be replaced
	// at any time, and a restart runs exactly the compiled content) and
	// the plugins' unix sockets; it writes nowhere else. Close removes the
	// working directory; New removes those of runtimes whose process died
	// without closing (on Linux; see the package documentation). ExecDir
	// must be writable and allow execution, e.g. a volume of a container
	// whose root file system is read-only; it is created if missing. At
	// most maxExecDir (44) bytes long as an absolute path, or the sockets
	// go to os.TempDir() instead (unix socket paths are short). Default:
	// os.TempDir().
	ExecDir string
}

// maxExecDir is the longest ExecDir (absolute) whose working directory can
// hold the plugins' unix sockets: a socket path is at most 107 bytes, and
// go-plugin puts it at "<ExecDir>/ssrun-plugins-<10 digits>/plugin-dir<10
// digits>/plugin<10 digits>".
const maxExecDir = 107 - len("/"+workdir.Prefix+"0123456789/plugin-dir0123456789/plugin0123456789")

// ErrClosed is returned by calls on a closed Runtime or Script.
var ErrClosed = errors.New("plugin: closed")

// Runtime is the native plugin abi.Runtime. Create it with New.
type Runtime struct {
	log  *slog.Logger
	sums map[string][sha256.Size]byte // by absolute path
	base string                       // ExecDir, absolute

	mu      sync.Mutex
	closed  bool
	scripts map[*script]struct{}
	bins    map[string]*binary // by relative path under dir
	dir     *workdir.Dir       // the working directory, made on first use

	connect     connector          // tests: serve plugins in-process; nil starts processes
	unaryOnly   bool               // tests: open no session, as with a plugin that predates it
	grpcSession bool               // tests and benchmarks: offer no raw session channel (sessions on their gRPC stream)
	noWake      bool               // tests: offer no InitRequest.session_wake (the plugin reads the raw channel with a goroutine of its own, as one built before it)
	rawOffered  func(*rawListener) // tests: called with each raw session channel offered, before Init
}

var _ abi.Runtime = (*Runtime)(nil)

// binary is a copy of a compiled plugin in the working directory, shared
// by the scripts running it and removed when the last one closes.
type binary struct {
	rel     string // "<hash prefix>/<file name>"
	path    string
	workDir string // the runtime's working directory
	sockets string // where go-plugin makes socket directories; "" for os.TempDir()
	refs    int
}

// New returns a Runtime, after removing the working directories under
// ExecDir that runtimes whose process died left behind. It fails when a
// checksum is not a SHA-256 in hex, a checksum's path cannot be made
// absolute, or ExecDir cannot be created.
func New(opts Config) (*Runtime, error) {
	r := &Runtime{
		log:     opts.Logger,
		sums:    map[string][sha256.Size]byte{},
		scripts: map[*script]struct{}{},
		bins:    map[string]*binary{},
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	for path, sum := range opts.Checksums {
		b, err := hex.DecodeString(strings.TrimSpace(sum))
		if err != nil || len(b) != sha256.Size {
			return nil, fmt.Errorf("plugin: checksum for %s: %q is not a SHA-256 in hex (64 hex digits)", path, sum)
		}
		abs, err := filepath.Abs(path)
		if err != nil {
			return nil, fmt.Errorf("plugin: checksum for %s: %w", path, err)
		}
		r.sums[abs] = [sha256.Size]byte(b)
	}
	if err := r.useExecDir(opts.ExecDir); err != nil {
		return nil, err
	}
	return r, nil
}

// useExecDir sets the base of the working directory, and removes the stale
// working directories there.
func (r *Runtime) useExecDir(dir string) error {
	explicit := dir != ""
	if !explicit {
		dir = os.TempDir()
	} else if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("plugin: exec dir: %w", err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("plugin: exec dir: %w", err)
	}
	r.base = abs
	if len(abs) > maxExecDir && explicit {
		r.log.Warn("plugin: the exec dir's path is too long for unix sockets; the plugins' sockets go to the temporary directory",
			"exec_dir", abs, "max_bytes", maxExecDir, "tmp", os.TempDir())
	}
	removed, err := workdir.RemoveStale(abs)
	for _, path := range removed {
		r.log.Info("removed the working directory of a plugin runtime whose process is gone", "path", path)
	}
	if err != nil {
		r.log.Warn("plugin: removing stale working directories failed", "exec_dir", abs, "err", err)
	}
	return nil
}

// Kind implements abi.Runtime.
func (r *Runtime) Kind() string { return "plugin" }

// Compile implements abi.Runtime. It checks the rule file: its content must
// match the checksum configured for it (if any), and the file must be a
// regular, non-empty, executable file. Whether it is a plugin shows only
// when Start runs it.
func (r *Runtime) Compile(_ context.Context, name string, src []byte) (abi.Program, error) {
	r.mu.Lock()
	closed := r.closed
	r.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	sum := sha256.Sum256(src)
	if abs, err := filepath.Abs(name); err == nil {
		if want, ok := r.sums[abs]; ok && want != sum {
			return nil, &abi.CompileError{File: name, Msg: fmt.Sprintf(
				"checksum mismatch: the file's sha256 is %x, the configured checksum is %x", sum, want)}
		}
	}
	info, err := os.Stat(name)
	switch {
	case err != nil:
		return nil, &abi.CompileError{File: name, Msg: err.Error()}
	case !info.Mode().IsRegular():
		return nil, &abi.CompileError{File: name, Msg: "not a regular file"}
	case info.Mode().Perm()&0o111 == 0:
		return nil, &abi.CompileError{File: name, Msg: fmt.Sprintf("not executable (mode %v)", info.Mode().Perm())}
	case len(src) == 0:
		return nil, &abi.CompileError{File: name, Msg: "empty file"}
	}
	return &program{rt: r, name: name, src: src, sum: sum}, nil
}

// Close implements abi.Runtime. It stops every plugin process still running
// (asking each to exit, then killing it when ctx ends or after a grace
// period) and removes the binaries it copied.
func (r *Runtime) Close(ctx context.Context) error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	scripts := make([]*script, 0, len(r.scripts))
	for s := range r.scripts {
		scripts = append(scripts, s)
	}
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range scripts {
		wg.Go(func() { _ = s.Close(ctx) })
	}
	wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir != nil {
		if err := r.dir.Remove(); err != nil {
			return fmt.Errorf("plugin: remove working directory: %w", err)
		}
	}
	return nil
}

// Stats describes one running plugin script.
type Stats struct {
	Path string // the rule file
	// Pid is the plugin's current process id; 0 while it is down.
	Pid int
	// Starts counts processes started and initialised (1 + restarts).
	Starts uint64
	// Exits counts processes that died or were killed other than by
	// Close: crashes, kills, and handler timeouts.
	Exits uint64
	// Timeouts counts handler calls that ran past the call timeout.
	Timeouts uint64
	// Lost counts events in flight when the process died: they were not
	// handled and are not redelivered.
	Lost uint64
}

// Stats returns the counters of every running script, sorted by path and
// then pid.
func (r *Runtime) Stats() []Stats {
	r.mu.Lock()
	scripts := make([]*script, 0, len(r.scripts))
	for s := range r.scripts {
		scripts = append(scripts, s)
	}
	r.mu.Unlock()
	out := make([]Stats, 0, len(scripts))
	for _, s := range scripts {
		out = append(out, s.stats())
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Path != out[j].Path {
			return out[i].Path < out[j].Path
		}
		return out[i].Pid < out[j].Pid
	})
	return out
}

// add registers a started script; false when the runtime is closed.
func (r *Runtime) add(s *script) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.scripts[s] = struct{}{}
	return true
}

func (r *Runtime) remove(s *script) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.scripts, s)
}

// acquire returns the executable copy of p, writing it if no running script
// uses it yet.
func (r *Runtime) acquire(p *program) (*binary, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, ErrClosed
	}
	rel := filepath.Join(hex.EncodeToString(p.sum[:8]), filepath.Base(p.name))
	if b := r.bins[rel]; b != nil {
		b.refs++
		return b, nil
	}
	if r.dir == nil {
		dir, err := workdir.Create(r.base)
		if err != nil {
			return nil, fmt.Errorf("plugin %s: working directory: %w", p.name, err)
		}
		r.dir = dir
	}
	path := filepath.Join(r.dir.Path, rel)
	if err := writeExecutable(path, p.src); err != nil {
		return nil, fmt.Errorf("plugin %s: copy to %s: %w", p.name, path, err)
	}
	b := &binary{rel: rel, path: path, workDir: r.dir.Path, refs: 1}
	if len(r.base) <= maxExecDir {
		b.sockets = r.dir.Path
	}
	r.bins[rel] = b
	return b, nil
}

// release drops a reference to b and removes the copy with the last one.
func (r *Runtime) release(b *binary) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.refs--; b.refs > 0 {
		return
	}
	delete(r.bins, b.rel)
	if err := os.RemoveAll(filepath.Dir(b.path)); err != nil {
		r.log.Warn("plugin: removing a binary copy failed", "path", b.path, "err", err)
	}
}

// writeExecutable writes src to path (mode 0700) through a temporary file,
// so a half-written file is never executed.
func writeExecutable(path string, src []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o700)
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		_ = os.Remove(f.Name())
	}
	return err
}

// program is a checked plugin file.
type program struct {
	rt   *Runtime
	name string
	src  []byte
	sum  [sha256.Size]byte
}
