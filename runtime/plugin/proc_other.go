//go:build !linux

package plugin

import (
	"context"
	"os/exec"
)

// treeCommand returns the command that runs a plugin directly: outside
// Linux there is no reaper, so only the plugin process itself is killed,
// and a plugin whose host is killed (rather than closed) keeps running.
func treeCommand(path string, args, env []string, _, _ string) *exec.Cmd {
	cmd := exec.Command(path)
	cmd.Args, cmd.Env = args, env
	return cmd
}

// startTree starts cmd.
func startTree(_ context.Context, cmd *exec.Cmd) (tree, error) {
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return direct{cmd}, nil
}

// direct is a plugin process started directly.
type direct struct{ cmd *exec.Cmd }

func (d direct) Pid() int       { return d.cmd.Process.Pid }
func (d direct) Terminate()     { _ = d.cmd.Process.Kill() }
func (d direct) Wait() error    { return d.cmd.Wait() }
func (d direct) Status() string { return "" } // procRunner falls back on ProcessState
