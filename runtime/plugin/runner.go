package plugin

import (
	"context"
	"io"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin/runner"
)

// tree is a started plugin process together with every process it starts
// (see proc_linux.go and proc_other.go).
type tree interface {
	// Pid returns the plugin's pid.
	Pid() int
	// Terminate ends the plugin and, where the platform allows, every
	// process below it, now. It does not wait.
	Terminate()
	// Wait waits until the started command has exited.
	Wait() error
	// Status returns the plugin's exit status ("exit status 3",
	// "signal: killed") once Wait returned; "" if unknown.
	Status() string
}

// procRunner is go-plugin's runner.Runner for one plugin process: it starts
// the plugin with startTree (on Linux under a reaper that owns the plugin's
// process tree), gives go-plugin the plugin's stdout for the handshake, and
// sends the plugin's original stderr to stderr (the rule's log) rather than
// to go-plugin, which would pass it on to the runtime's logger.
type procRunner struct {
	cmd    *exec.Cmd // the command started: the reaper, or the plugin
	name   string    // the rule file, for go-plugin's messages
	stdout io.ReadCloser
	tree   tree          // set by Start
	exited chan struct{} // closed when Wait returned
}

var _ runner.Runner = (*procRunner)(nil)

// newRunner prepares the process for the plugin binary at path, run with
// args (args[0] included) and the environment go-plugin prepared in spec;
// workDir is the runtime's working directory, sockDir the plugin's socket
// directory.
func newRunner(spec *exec.Cmd, name, path string, args []string, workDir, sockDir string, stderr io.Writer) (*procRunner, error) {
	cmd := treeCommand(path, args, spec.Env, workDir, sockDir)
	cmd.Stdin = spec.Stdin
	cmd.Stderr = stderr
	// Bounds Wait if a process out of the tree's reach keeps stderr open.
	cmd.WaitDelay = killGrace
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	return &procRunner{cmd: cmd, name: name, stdout: stdout, exited: make(chan struct{})}, nil
}

// Start implements runner.Runner.
func (r *procRunner) Start(ctx context.Context) error {
	t, err := startTree(ctx, r.cmd)
	if err != nil {
		return err
	}
	r.tree = t
	return nil
}

// Wait implements runner.Runner.
func (r *procRunner) Wait(context.Context) error {
	defer close(r.exited)
	return r.tree.Wait()
}

// Kill implements runner.Runner: go-plugin calls it when the plugin did not
// exit when asked. It terminates the tree and waits for it, and kills the
// started command outright if that takes longer than killGrace.
func (r *procRunner) Kill(context.Context) error {
	if r.tree == nil {
		return nil
	}
	r.tree.Terminate()
	t := time.NewTimer(killGrace)
	defer t.Stop()
	select {
	case <-r.exited:
	case <-t.C:
		_ = r.cmd.Process.Kill()
	}
	return nil
}

// terminate ends the tree now, without waiting.
func (r *procRunner) terminate() {
	if r.tree != nil {
		r.tree.Terminate()
	}
}

// pid returns the plugin's pid; 0 before Start, or without a runner (a
// plugin served in-process by a test).
func (r *procRunner) pid() int {
	if r == nil || r.tree == nil {
		return 0
	}
	return r.tree.Pid()
}

// status describes how the plugin ended, once Wait returned.
func (r *procRunner) status() string {
	if r.tree != nil {
		if s := r.tree.Status(); s != "" {
			return s
		}
	}
	if st := r.cmd.ProcessState; st != nil {
		return st.String()
	}
	return "unknown"
}

// Stdout implements runner.Runner.
func (r *procRunner) Stdout() io.ReadCloser { return r.stdout }

// Stderr implements runner.Runner: nothing, as the plugin's stderr goes to
// the rule's log.
func (r *procRunner) Stderr() io.ReadCloser { return io.NopCloser(strings.NewReader("")) }

// Name implements runner.Runner.
func (r *procRunner) Name() string { return r.name }

// ID implements runner.Runner: the plugin's pid; "" before Start.
func (r *procRunner) ID() string {
	if r.tree == nil {
		return ""
	}
	return strconv.Itoa(r.tree.Pid())
}

// Diagnose implements runner.Runner: the hint added to a failed handshake.
func (r *procRunner) Diagnose(context.Context) string {
	return "the file must be an ssrun plugin: an executable for this platform that serves the plugin handshake (runtime/plugin/sdk)"
}

// PluginToHost implements runner.AddrTranslator: host and plugin share the
// file system and network.
func (r *procRunner) PluginToHost(network, addr string) (string, string, error) {
	return network, addr, nil
}

// HostToPlugin implements runner.AddrTranslator.
func (r *procRunner) HostToPlugin(network, addr string) (string, string, error) {
	return network, addr, nil
}
