package plugin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/abi/abitest"
	"github.com/ssrun/ssrun/internal/testutil"
)

// treeGone waits (up to 10 s) until none of the processes of a spawned tree
// runs, and names those that still do.
func treeGone(t testing.TB, pids []int) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		left = left[:0]
		for i, pid := range pids {
			if alive(pid) {
				left = append(left, fmt.Sprintf("%s (pid %d)", treeRoles[i], pid))
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("still running 10 s later: %s", strings.Join(left, ", "))
}

// within runs f and fails the test if f fails or has not returned within
// 30 s (a descendant holding the plugin's stderr open once kept go-plugin,
// and so Close, waiting forever).
func within(t testing.TB, what string, f func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s has not returned after 30 s", what)
	}
}

// TestTreeDiesWithPlugin: whenever the runtime ends a plugin process, every
// process it started ends too, including those that left its process group
// and session: the plain child, the setsid child and the double-forked
// daemon of testdata/rule/tree.go, all deaf to SIGTERM.
func TestTreeDiesWithPlugin(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(t *testing.T, r *Runtime, s *script, pids []int)
	}{
		{"handler timeout", func(t *testing.T, _ *Runtime, s *script, _ []int) {
			wantError(t, s.Handle(context.Background(), command("hang")), callHandle, abi.ErrTimeout)
		}},
		{"plugin exits", func(t *testing.T, _ *Runtime, s *script, _ []int) {
			wantError(t, s.Handle(context.Background(), command("exit")), callHandle, abi.ErrCrashed)
		}},
		{"plugin killed", func(t *testing.T, _ *Runtime, _ *script, pids []int) {
			if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
		}},
		{"script closed", func(t *testing.T, _ *Runtime, s *script, _ []int) {
			within(t, "Script.Close", func() error { return s.Close(context.Background()) })
		}},
		{"runtime closed", func(t *testing.T, r *Runtime, _ *script, _ []int) {
			within(t, "Runtime.Close", func() error { return r.Close(context.Background()) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := abitest.New()
			r, _ := newRuntime(t, Config{Logger: quietLogger()})
			s := start(t, compile(t, r, rulePlugin(t)), h, abi.Limits{CallTimeout: 3 * time.Second})
			pids := spawnTree(t, s, h)
			tc.end(t, r, s, pids)
			treeGone(t, pids)
		})
	}
}

// TestTreeDiesWithHost: when the host process ends by SIGTERM (and closes
// its runtime, as ssrun does) or by SIGKILL (no chance to close anything),
// every plugin process and every process a plugin started ends too, and
// nothing is left in the temporary directory, whether it is short enough to
// hold the plugins' sockets in the runtime's working directory or not.
func TestTreeDiesWithHost(t *testing.T) {
	rulePlugin(t) // built before TMPDIR changes
	for _, tc := range []struct {
		sig   syscall.Signal
		short bool // a TMPDIR of at most maxExecDir bytes
	}{
		{syscall.SIGTERM, true},
		{syscall.SIGKILL, true},
		{syscall.SIGKILL, false},
	} {
		t.Run(fmt.Sprintf("%v/short=%t", tc.sig, tc.short), func(t *testing.T) {
			tmp := tempDir(t, tc.short)
			hp := startHelper(t, tmp, true)
			killAtEnd(t, hp.pids)
			if entries, _ := os.ReadDir(tmp); len(entries) == 0 {
				t.Fatal("the helper host wrote nothing into its TMPDIR: the test cannot see a leftover")
			}
			if err := syscall.Kill(hp.cmd.Process.Pid, tc.sig); err != nil {
				t.Fatal(err)
			}
			select {
			case <-hp.done:
			case <-time.After(30 * time.Second):
				t.Fatalf("the helper host did not exit within 30 s of %v", tc.sig)
			}
			if tc.sig == syscall.SIGTERM && hp.err != nil {
				t.Errorf("helper host after SIGTERM: %v, want a clean exit", hp.err)
			}
			treeGone(t, hp.pids)
			emptyDir(t, tmp)
		})
	}
}

// tempDir returns a new directory, removed at the test's end, for TMPDIR:
// if short, a path of at most maxExecDir bytes; else one byte longer (still
// short enough for go-plugin's sockets right in it). The test is skipped if
// os.TempDir() is too long for that.
func tempDir(t *testing.T, short bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ssrun-tmp-")
	if err != nil {
		t.Fatal(err)
	}
	root := dir
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if len(dir) >= maxExecDir {
		t.Skipf("os.TempDir() %s is too long for a short working directory", os.TempDir())
	}
	if short {
		return dir
	}
	dir = filepath.Join(dir, strings.Repeat("x", maxExecDir-len(dir)))
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// emptyDir waits (up to 10 s) until dir is empty, and names what is left.
func emptyDir(t testing.TB, dir string) {
	t.Helper()
	var left []string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		left = left[:0]
		_ = filepath.WalkDir(dir, func(path string, _ os.DirEntry, _ error) error {
			if path != dir {
				left = append(left, path)
			}
			return nil
		})
		if len(left) == 0 {
			return
		}
	}
	t.Fatalf("left in %s: %s", dir, strings.Join(left, " "))
}

// descendants returns the pids of every live descendant of pid.
func descendants(t testing.TB, pid int) []int {
	t.Helper()
	procs := processes(t)
	var out []int
	for p := range procs {
		for a := procs[p].ppid; a > 1; a = procs[a].ppid {
			if a == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// TestStaleWorkDirs: a new Runtime removes the working directories of
// runtimes whose process is gone (here: a host killed together with every
// process it started, as when its container is killed, so that none could
// clean up), and keeps those of live runtimes and directories it cannot
// tell are its own.
func TestStaleWorkDirs(t *testing.T) {
	plugin := rulePlugin(t) // built before TMPDIR changes
	base := t.TempDir()
	t.Setenv("TMPDIR", base)
	workDirs := func() []string {
		m, err := filepath.Glob(filepath.Join(base, "ssrun-plugins-*"))
		if err != nil {
			t.Fatal(err)
		}
		return m
	}

	// A live owner: a runtime of this process, running a plugin.
	h := abitest.New()
	live, _ := newRuntime(t, Config{Logger: quietLogger()})
	s := start(t, compile(t, live, plugin), h, abi.Limits{})
	liveDirs := workDirs()
	if len(liveDirs) != 1 {
		t.Fatalf("working directories of a running plugin: %v, want 1", liveDirs)
	}

	// A dead owner: stopped, then killed with all its processes at once.
	hp := startHelper(t, base, false)
	pid := hp.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	tree := append(descendants(t, pid), pid)
	killAtEnd(t, tree)
	for _, p := range tree {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	<-hp.done
	for _, p := range tree {
		testutil.ProcessGone(t, p)
	}
	var dead []string
	for _, d := range workDirs() {
		if !slices.Contains(liveDirs, d) {
			dead = append(dead, d)
		}
	}
	if len(dead) != 1 {
		t.Fatalf("working directories %v: want the live one %v and one of the killed host", workDirs(), liveDirs)
	}

	// Not provably ours: no owner lock (as versions before it made), or not
	// a directory.
	legacy := filepath.Join(base, "ssrun-plugins-legacy")
	file := filepath.Join(base, "ssrun-plugins-file")
	if err := os.Mkdir(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &testutil.Buffer{}
	_, _ = newRuntime(t, Config{Logger: slogTo(logs)})
	if _, err := os.Stat(dead[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the killed host's directory %s is still there (%v)", dead[0], err)
	}
	for _, keep := range append(liveDirs, legacy, file) {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	if want := `msg="removed the working directory of a plugin runtime whose process is gone" path=` + dead[0]; !strings.Contains(logs.String(), want) {
		t.Errorf("log lacks %s:\n%s", want, logs)
	}
	run(t, s, h, command("pid")) // the live runtime's plugin still works
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestExecDirOnly: with Config.ExecDir set, the runtime writes nowhere
// else (a container with a read-only root filesystem points it at a
// writable volume), and Close leaves ExecDir as it found it.
func TestExecDirOnly(t *testing.T) {
	plugin := rulePlugin(t) // built before TMPDIR changes
	execDir := t.TempDir()
	t.Setenv("TMPDIR", filepath.Join(execDir, "not-there")) // unusable
	h := abitest.New()
	r, _ := newRuntime(t, Config{ExecDir: execDir, Logger: quietLogger()})
	s := start(t, compile(t, r, plugin), h, abi.Limits{})
	run(t, s, h, command("pid"))
	if err := r.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(execDir); len(entries) != 0 {
		t.Errorf("ExecDir holds %v after Close, want it empty", entries)
	}
}
