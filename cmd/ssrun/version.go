package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"
)

// version describes this binary from its build information: the module
// version ("(devel)" for a build from a checkout), then the VCS revision,
// its time and whether the tree had uncommitted changes, when the go tool
// recorded them, and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information), " + runtime.Version()
	}
	return versionOf(bi)
}

// versionOf is version for the build information bi.
func versionOf(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	parts := []string{v}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	if rev := settings["vcs.revision"]; rev != "" {
		parts = append(parts, "revision "+rev)
	}
	if t := settings["vcs.time"]; t != "" {
		parts = append(parts, "committed "+t)
	}
	if settings["vcs.modified"] == "true" {
		parts = append(parts, "with uncommitted changes")
	}
	parts = append(parts, bi.GoVersion)
	return strings.Join(parts, ", ")
}

// versionCmd is `ssrun version`, the same as `ssrun --version`.
func (a *app) versionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of ssrun (module version and VCS revision)",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(a.stdout, "ssrun %s\n", version())
			return nil
		},
	}
}
