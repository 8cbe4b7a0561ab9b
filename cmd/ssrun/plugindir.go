package main

import "github.com/spf13/cobra"

// pluginDirFlag registers --plugin-dir on cmd (dev and run): the directory
// under which the plugin runtime makes its working directory, for the copies
// of the plugin binaries it runs and their unix sockets
// (plugin.Config.ExecDir). It must be writable and allow execution; in a
// container whose root file system is read-only, mount a volume there (the
// Kubernetes manifest in deploy/ mounts an emptyDir). Empty means the
// temporary directory: $TMPDIR, else /tmp.
func pluginDirFlag(cmd *cobra.Command, dir *string) {
	cmd.Flags().StringVar(dir, "plugin-dir", "",
		"writable, exec-able directory for the copies of running plugin binaries and their sockets (default $TMPDIR or /tmp)")
}
