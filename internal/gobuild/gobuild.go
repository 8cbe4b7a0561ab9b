// Package gobuild builds Go packages from tests, as the docs tell users to:
// WebAssembly rules (wasip1, c-shared) and executables (plugins). Dir keeps
// what one test binary builds, each build made once.
package gobuild

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
)

// WASM builds pkg as a WebAssembly rule into dst:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared [-ldflags=<ldflags>] -o dst pkg
//
// The ldflags are joined with spaces. The error holds the build's output.
func WASM(dst, pkg string, ldflags ...string) error {
	return build([]string{"GOOS=wasip1", "GOARCH=wasm"}, dst, pkg, append([]string{"-buildmode=c-shared"}, ldflagsArg(ldflags)...))
}

// Exe builds pkg as an executable (a plugin) into dst:
//
//	go build [-ldflags=<ldflags>] -o dst pkg
//
// The ldflags are joined with spaces. The error holds the build's output.
func Exe(dst, pkg string, ldflags ...string) error {
	return build(nil, dst, pkg, ldflagsArg(ldflags))
}

func ldflagsArg(ldflags []string) []string {
	if len(ldflags) == 0 {
		return nil
	}
	return []string{"-ldflags=" + strings.Join(ldflags, " ")}
}

func build(env []string, dst, pkg string, flags []string) error {
	args := append(append([]string{"build"}, flags...), "-o", dst, pkg)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		line := strings.Join(append(append(env[:len(env):len(env)], "go"), args...), " ")
		return fmt.Errorf("%s: %w\n%s", line, err, out)
	}
	return nil
}

// Dir is a temporary directory, made on first use, for what one test binary
// builds: each file in it is built at most once, however many tests (in
// parallel or not) ask for it. A package-level Dir serves a test binary;
// its TestMain calls Remove after the tests ran.
type Dir struct {
	Prefix string // of the directory's name, as in os.MkdirTemp

	mu     sync.Mutex
	path   string
	err    error
	builds map[string]*result
}

type result struct {
	once sync.Once
	err  error
}

// Path returns the directory, making it on first use.
func (d *Dir) Path() (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" && d.err == nil {
		d.path, d.err = os.MkdirTemp("", d.Prefix)
	}
	return d.path, d.err
}

// WASM returns the path of the file name in d, built from pkg by WASM on
// the first call for name; later calls wait for that build and return its
// result.
func (d *Dir) WASM(name, pkg string, ldflags ...string) (string, error) {
	return d.once(name, func(dst string) error { return WASM(dst, pkg, ldflags...) })
}

// Exe is WASM for an executable, built by Exe.
func (d *Dir) Exe(name, pkg string, ldflags ...string) (string, error) {
	return d.once(name, func(dst string) error { return Exe(dst, pkg, ldflags...) })
}

func (d *Dir) once(name string, build func(dst string) error) (string, error) {
	dir, err := d.Path()
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	if d.builds == nil {
		d.builds = map[string]*result{}
	}
	r, ok := d.builds[name]
	if !ok {
		r = &result{}
		d.builds[name] = r
	}
	d.mu.Unlock()
	dst := filepath.Join(dir, name)
	r.once.Do(func() { r.err = build(dst) })
	if r.err != nil {
		return "", r.err
	}
	return dst, nil
}

// Remove removes the directory, if it was made, and everything in it.
func (d *Dir) Remove() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.path == "" {
		return nil
	}
	return os.RemoveAll(d.path)
}
