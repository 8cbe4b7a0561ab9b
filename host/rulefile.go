package host

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/ssrun/ssrun/abi"
	"github.com/ssrun/ssrun/internal/safefile"
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

// ruleFiles lists the rule files in dir that runtimes run, in name order:
// what LoadDir loads and Checker.Files checks. notRule, when not nil, is
// called with each other file (not folders).
func ruleFiles(dir string, runtimes map[string]abi.Runtime, notRule func(p string, info os.FileInfo)) ([]string, error) {
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
		if kind, ok := RuleKind(p, info); ok && runtimes[kind] != nil {
			files = append(files, p)
		} else if notRule != nil && !info.IsDir() {
			notRule(p, info)
		}
	}
	return files, nil
}

// MaxRuleFileBytes bounds a rule file; a larger one is refused. Plugins,
// native executables, are the largest rule files (tens of MB).
const MaxRuleFileBytes = 256 << 20

// ReadRuleFile reads the rule file at path, refusing at once, with an
// error naming the file, what is not a regular file (a link to /dev/zero,
// a named pipe: neither is read nor waited on) and a file larger than
// MaxRuleFileBytes (see internal/safefile). Every error names the file.
func ReadRuleFile(path string) ([]byte, error) {
	return safefile.Read(path, MaxRuleFileBytes)
}
