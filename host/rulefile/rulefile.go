// Package rulefile says which files of a rules folder are rules and on which
// runtime kind (by extension; an executable without one is a plugin), lists
// them, and reads them within a bound, refusing what is not a regular file.
package rulefile

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/safefile"
)

// Kind returns the runtime kind that runs the file at path, by
// extension: "x.lua" runs on the runtime of kind "lua", "x.wasm" on "wasm",
// and an executable file without an extension on "plugin". Hidden files,
// editor backups and directories are not rules.
func Kind(path string, info os.FileInfo) (string, bool) {
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

// LacksExecBit reports whether the file at p looks like a plugin that cannot
// run: a regular file without an extension that is not executable (from a
// ConfigMap volume, or a copy that lost its mode).
func LacksExecBit(p string, info os.FileInfo) bool {
	base := filepath.Base(p)
	return info.Mode().IsRegular() && filepath.Ext(base) == "" && !strings.HasPrefix(base, ".") && !strings.HasSuffix(base, "~") &&
		info.Mode().Perm()&0o111 == 0
}

// NotPluginHint says why a file without an extension is no rule, and the fix.
const NotPluginHint = "without an extension only an executable is a rule (a plugin); if it is one, make it executable"

// WarnNotRule warns about a file that looks like a plugin but cannot run.
func WarnNotRule(log *slog.Logger, p string, info os.FileInfo) {
	if LacksExecBit(p, info) {
		log.Warn("file ignored: "+NotPluginHint, "file", p, "fix", "chmod +x "+p)
	}
}

// List lists the rule files in dir that runtimes run, in name order:
// what LoadDir loads and Checker.Files checks. notRule, when not nil, is
// called with each other file (not folders).
func List(dir string, runtimes map[string]abi.Runtime, notRule func(p string, info os.FileInfo)) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("rules folder: %w", err)
	}
	var files []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		info, err := os.Stat(p) // follows links, as Load does
		if err != nil {
			continue
		}
		if kind, ok := Kind(p, info); ok && runtimes[kind] != nil {
			files = append(files, p)
		} else if notRule != nil && !info.IsDir() {
			notRule(p, info)
		}
	}
	return files, nil
}

// MaxBytes bounds a rule file; a larger one is refused. Plugins,
// native executables, are the largest rule files (tens of MB).
const MaxBytes = 256 << 20

// Read reads the rule file at path, refusing at once, with an
// error naming the file, what is not a regular file (a link to /dev/zero,
// a named pipe: neither is read nor waited on) and a file larger than
// MaxBytes (see internal/safefile). Every error names the file.
func Read(path string) ([]byte, error) {
	return safefile.Read(path, MaxBytes)
}
