package plugin

import (
	"context"
	"os/exec"

	"github.com/ssrun/ssrun/runtime/plugin/internal/reaper"
)

// treeCommand returns the command that runs a plugin under a reaper (see
// package reaper): a supervisor process that owns the plugin's whole
// process tree and ends it when the plugin exits, when the runtime ends
// the plugin, and when the host dies, even by SIGKILL.
func treeCommand(path string, args, env []string, workDir, sockDir string) *exec.Cmd {
	return reaper.Command(path, args, env, workDir, sockDir)
}

// startTree starts cmd (from treeCommand) and returns once the plugin runs.
func startTree(ctx context.Context, cmd *exec.Cmd) (tree, error) {
	return reaper.Start(ctx, cmd)
}
