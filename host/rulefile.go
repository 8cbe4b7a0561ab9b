package host

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
)

// RuleKind returns the runtime kind that runs the file at path, by
// extension: "x.lua" runs on the runtime of kind "lua", "x.wasm" on "wasm",
// and an executable file without an extension on "plugin". Hidden files,
// editor backups and directories are not rules.
func RuleKind(path string, info os.FileInfo) (string, bool) {
	base := filepath.Base(path)
	if info.IsDir() || strings.HasPrefix(base, ".") || strings.HasSuffix(base, "~") {
		return "", false
	}
	kind := strings.TrimPrefix(filepath.Ext(base), ".")
	switch {
	case kind == "plugin":
		return "", false
	case kind != "":
		return kind, true
	case info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0:
		return "plugin", true
	}
	return "", false
}

// lacksExecBit reports whether the file at p looks like a plugin that cannot
// run: a regular file without an extension that is not executable (from a
// ConfigMap volume, or a copy that lost its mode).
func lacksExecBit(p string, info os.FileInfo) bool {
	base := filepath.Base(p)
	return info.Mode().IsRegular() && filepath.Ext(base) == "" && !strings.HasPrefix(base, ".") && !strings.HasSuffix(base, "~") &&
		info.Mode().Perm()&0o111 == 0
}

// notPluginHint says why a file without an extension is no rule, and the fix.
const notPluginHint = "without an extension only an executable is a rule (a plugin); if it is one, make it executable"

// warnNotRule warns about a file that looks like a plugin but cannot run.
func warnNotRule(log *slog.Logger, p string, info os.FileInfo) {
	if lacksExecBit(p, info) {
		log.Warn("file ignored: "+notPluginHint, "file", p, "fix", "chmod +x "+p)
	}
}
