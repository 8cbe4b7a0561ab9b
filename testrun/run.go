package testrun

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/host/rulefile"
	"github.com/ssrun/ssrun/protocol"
)

// Options configure Run.
type Options struct {
	// Runtimes run the rules, by kind (as for host.Config).
	Runtimes []abi.Runtime
	// Config returns the settings of the rule file at path (from the
	// folder's ssrun.yaml); the defaults when nil.
	Config func(path string) (host.RuleConfig, error)
	// Run, when set, runs only the cases whose name ("file/case", spaces
	// as "_") it matches.
	Run *regexp.Regexp
	// Report receives the results.
	Report *Reporter
	// Warn, when set, is told what the tests may not show: a rule file
	// built from sources that are newer than it.
	Warn func(string)
}

// ErrBadInput marks failures that are no test failure: a test file that
// does not parse, a rule that does not compile, a missing file.
var ErrBadInput = errors.New("bad input")

// IsTestFile reports whether name is a test file's name.
func IsTestFile(name string) bool {
	for _, ext := range []string{".yaml", ".yml"} {
		if base, ok := strings.CutSuffix(name, ext); ok {
			return strings.HasSuffix(base, ".test") || strings.HasSuffix(base, "_test")
		}
	}
	return false
}

// Find returns the test files named by args: a file, a folder (its test
// files), or a folder followed by "/..." (its test files and those of every
// folder below it). No args means ".".
func Find(args []string) ([]string, error) {
	if len(args) == 0 {
		args = []string{"."}
	}
	var out []string
	for _, a := range args {
		root, deep := strings.CutSuffix(a, "/...")
		if a == "..." {
			root, deep = ".", true
		}
		info, err := os.Stat(root)
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		if !info.IsDir() {
			out = append(out, root)
			continue
		}
		n := len(out)
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && p != root && (!deep || strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules" || d.Name() == "testdata") {
				return filepath.SkipDir
			}
			if !d.IsDir() && IsTestFile(d.Name()) {
				out = append(out, p)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		if len(out) == n && !deep {
			return nil, fmt.Errorf("%w: %s: no test files (NAME.test.yaml or NAME_test.yaml)", ErrBadInput, root)
		}
	}
	return out, nil
}

// Run runs the test files at paths and reports each case. It returns the
// number of failed cases, and an error wrapping ErrBadInput for a file it
// could not run.
func Run(ctx context.Context, paths []string, opts Options) (failed int, err error) {
	files := make([]*File, 0, len(paths))
	for _, p := range paths {
		f, err := Load(p)
		if err != nil {
			return 0, fmt.Errorf("%w: %v", ErrBadInput, err)
		}
		files = append(files, f)
	}
	for _, f := range files {
		n, err := runFile(ctx, f, opts)
		failed += n
		if err != nil {
			return failed, err
		}
	}
	return failed, nil
}

// rule is a compiled rule file with its settings. A case's host loads
// it from path (compiling it again, as ssrun dev would); the replay of a
// host trace starts prog.
type rule struct {
	name string // file name
	path string
	prog abi.Program
	cfg  host.RuleConfig
}

func runFile(ctx context.Context, f *File, opts Options) (failed int, err error) {
	start := time.Now()
	rules, err := compile(ctx, f, opts)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %v", ErrBadInput, f.Path, err)
	}
	ran := 0
	for i := range f.Cases {
		c := &f.Cases[i]
		name := filepath.Base(f.Path) + "/" + strings.ReplaceAll(c.Name, " ", "_")
		if opts.Run != nil && !opts.Run.MatchString(name) {
			continue
		}
		ran++
		opts.Report.start(f.Path, name)
		t0 := time.Now()
		problems := runCase(ctx, f, c, rules, opts.Runtimes)
		if len(problems) > 0 {
			failed++
		}
		opts.Report.end(f.Path, name, time.Since(t0), problems)
	}
	opts.Report.file(f.Path, ran, failed, time.Since(start))
	return failed, nil
}

// compile compiles the file's rules: those it names, or every rule in its
// folder that one of the runtimes runs. A rule that does not compile is
// bad input.
func compile(ctx context.Context, f *File, opts Options) ([]rule, error) {
	dir := filepath.Dir(f.Path)
	kinds := map[string]abi.Runtime{}
	for _, rt := range opts.Runtimes {
		kinds[rt.Kind()] = rt
	}
	names := f.Rules
	if len(names) == 0 {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			info, err := e.Info()
			if err != nil {
				return nil, err
			}
			if kind, ok := rulefile.Kind(e.Name(), info); ok && kinds[kind] != nil {
				names = append(names, e.Name())
			}
		}
		if len(names) == 0 {
			return nil, fmt.Errorf("no rules in %s", dir)
		}
	}
	var out []rule
	for _, n := range slices.Sorted(slices.Values(names)) {
		p := filepath.Join(dir, n)
		info, err := os.Stat(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", missingRule(p, err))
		}
		if w := staleRule(p, info.ModTime()); w != "" && opts.Warn != nil {
			opts.Warn(w)
		}
		kind, ok := rulefile.Kind(p, info)
		if !ok || kinds[kind] == nil {
			return nil, fmt.Errorf("rules: %s is not a rule file ssrun runs", n)
		}
		src, err := rulefile.Read(p)
		if err != nil {
			return nil, fmt.Errorf("rules: %w", err)
		}
		prog, err := kinds[kind].Compile(ctx, p, src)
		if err != nil {
			return nil, err
		}
		var cfg host.RuleConfig
		if opts.Config != nil {
			if cfg, err = opts.Config(p); err != nil {
				return nil, err
			}
		}
		out = append(out, rule{name: n, path: p, prog: prog, cfg: cfg})
	}
	return out, nil
}

// runCase runs one case on a fresh engine and returns what went wrong.
func runCase(ctx context.Context, f *File, c *Case, rules []rule, runtimes []abi.Runtime) (problems []string) {
	if slices.ContainsFunc(c.Steps, func(s Step) bool { return len(s.Reload) > 0 }) {
		// The case rewrites rule files: its host runs copies of them.
		tmp, err := os.MkdirTemp("", "ssrun-test-*")
		if err != nil {
			return []string{err.Error()}
		}
		defer os.RemoveAll(tmp)
		if rules, err = copyRules(rules, tmp); err != nil {
			return []string{err.Error()}
		}
	}
	obs := newObserved()
	e, err := newEngine(ctx, f.start, c.Seed, rules, runtimes, obs, func(ctx context.Context, out *protocol.Client) error {
		for _, k := range sortedKeys(c.Store) {
			if _, err := out.Set(ctx, []byte(k), []byte(c.Store[k]), protocol.SetOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
	defer func() {
		if err := e.close(context.WithoutCancel(ctx)); err != nil {
			problems = append(problems, fmt.Sprintf("stopping the rules: %v", err))
		}
	}()
	if err != nil {
		return []string{err.Error()}
	}
	e.srcDir = filepath.Dir(f.Path)
	obs.take() // what the rules' start did is no step's
	for i := range c.Steps {
		s := &c.Steps[i]
		if err := e.step(ctx, s); err != nil {
			return append(problems, fmt.Sprintf("step %d (%s, line %d): %v", i+1, s, s.Line, err))
		}
		logs, writes := obs.take()
		if diffs := e.check(ctx, s.Expect, texts(logs), writes); len(diffs) > 0 {
			problems = append(problems, fmt.Sprintf("step %d (%s, line %d):\n    %s", i+1, s, s.Line, strings.Join(diffs, "\n    ")))
		}
	}
	return problems
}

// errStoreDown is why the host's connection ends at a store: down step.
var errStoreDown = errors.New("the store went down (a test step)")

// step performs the step's action and runs the host until it is idle.
func (e *engine) step(ctx context.Context, s *Step) error {
	switch {
	case len(s.Set) > 0:
		return e.hold(ctx, func() error {
			for _, kv := range s.Set {
				if _, err := e.outside.Set(ctx, []byte(kv.Key), []byte(kv.Value), protocol.SetOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	case len(s.Delete) > 0:
		return e.hold(ctx, func() error {
			for _, k := range s.Delete {
				if _, err := e.outside.Del(ctx, []byte(k), protocol.DelOptions{}); err != nil {
					return err
				}
			}
			return nil
		})
	case s.Advance != "":
		return e.advance(ctx, e.clock.Now().Add(s.advance))
	case s.Store == "down":
		return e.hold(ctx, func() error { e.client.LocalDown(errStoreDown); return nil })
	case s.Store == "up":
		return e.hold(ctx, e.client.LocalUp)
	case s.LoseLock != "":
		return e.loseLock(ctx, s.LoseLock)
	case len(s.Reload) > 0:
		return e.hold(ctx, func() error {
			for _, kv := range s.Reload {
				if err := e.reload(ctx, kv.Key, filepath.Join(e.srcDir, kv.Value)); err != nil {
					return err
				}
			}
			return nil
		})
	default:
		return e.fence(ctx, s.Fence)
	}
}

// copyRules copies the rule files to dir and returns the rules there.
func copyRules(rules []rule, dir string) ([]rule, error) {
	out := slices.Clone(rules)
	for i, r := range out {
		src, err := rulefile.Read(r.path)
		if err != nil {
			return nil, err
		}
		info, err := os.Stat(r.path)
		if err != nil {
			return nil, err
		}
		out[i].path = filepath.Join(dir, r.name)
		if err := os.WriteFile(out[i].path, src, info.Mode().Perm()); err != nil {
			return nil, err
		}
	}
	return out, nil
}
