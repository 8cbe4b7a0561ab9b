package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/ssrun/ssrun/host"
)

// checkCmd is `ssrun check`: everything dev would refuse to load, found
// without a store.
func (a *app) checkCmd() *cobra.Command {
	var timeout time.Duration
	var config string
	var of ociFlags
	cmd := &cobra.Command{
		Use:   "check PATH...",
		Short: "Prove rule files and folders load, without running them against a store",
		Long: `Prove rule files and folders load, without running them against a store.

A FOLDER is checked as dev and run would load it: its rule files (*.lua,
*.wasm, executables without an extension; READMEs, tests and data are not
rules), the plugins and the rule settings of its ssrun.yaml (or --config).
Each rule is compiled, then started against an empty in-memory store under
its limits and permissions, and stopped: a syntax error, an error in its
top-level code, a Lua rule without on_event or naming an ss.* function
that does not exist, a plugin that does not handshake, a WebAssembly module
with wrong imports, a bad ssrun.yaml and a rule entry in it that matches no
rule file are each reported with file and line. The exit status is 1 when
anything failed. oci://REGISTRY/REPOSITORY:TAG (or @sha256:DIGEST) checks
an artifact pushed with ssrun push, pulled into a temporary folder.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var failed, total int
			for _, arg := range args {
				p, closeRules, err := a.openRules(cmd.Context(), &of, arg)
				if err != nil {
					return err
				}
				f, n, err := a.checkPath(cmd.Context(), p, config, timeout)
				err = errors.Join(err, closeRules())
				if err != nil {
					return err
				}
				failed, total = failed+f, total+n
			}
			if failed > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d of %d check(s) failed", failed, total)}
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&timeout, "timeout", host.DefaultLoadTimeout, "bound for compiling and starting each rule")
	of.register(cmd, false)
	cmd.Flags().StringVar(&config, "config", "", "ssrun.yaml with rule limits, permissions and plugins (default FOLDER/ssrun.yaml if present)")
	return cmd
}

// checkPath checks the rule file or folder p, printing "ok FILE" for each
// rule that would load and the reason for each that would not. It returns
// the failures and the checks made; err only for what stops the command.
func (a *app) checkPath(ctx context.Context, p, config string, timeout time.Duration) (failed, total int, err error) {
	info, err := os.Stat(p)
	if err != nil {
		fmt.Fprintln(a.stderr, shown(err.Error()))
		return 1, 1, nil
	}
	var cfg *fileConfig
	if info.IsDir() {
		cfg, err = rulesConfig(p, config)
	} else if config != "" {
		cfg, err = loadConfig(config)
	}
	if err != nil {
		fmt.Fprintln(a.stderr, shown(err.Error())) // names the file and, for YAML, the line
		return 1, 1, nil
	}
	rts, err := a.runtimes(cfg)
	if err != nil {
		return 0, 0, err
	}
	c := host.NewChecker(rts, timeout)
	defer func() {
		// A compile that did not return keeps its runtime busy; both are
		// left to the exit after a grace.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), host.DefaultGrace)
		defer cancel()
		if err := c.Close(cctx); err != nil {
			a.log.Warn("check", "err", err)
		} else {
			a.closeRuntimes(cctx, rts)
		}
	}()
	files := []string{p}
	if cfg != nil {
		if err := c.SetRuleConfig(cfg.Defaults.toHost(), cfg.hostRules()); err != nil {
			fmt.Fprintln(a.stderr, shown(fmt.Sprintf("config %s: %v", cfg.path, err)))
			return 1, 1, nil
		}
	}
	if info.IsDir() {
		if files, err = c.Files(p); err != nil {
			fmt.Fprintln(a.stderr, shown(err.Error()))
			return 1, 1, nil
		}
		for _, pl := range cfg.pluginPaths() {
			if !slices.Contains(files, filepath.Clean(pl)) {
				files = append(files, filepath.Clean(pl))
			}
		}
		for _, msg := range cfg.unmatchedRules(p, files) {
			fmt.Fprintln(a.stderr, shown(msg))
			failed++
			total++
		}
		if len(files) == 0 {
			fmt.Fprintf(a.stdout, "no rule files in %s (want .lua, .wasm or executable plugins)\n", shown(p))
		}
	}
	for _, f := range files {
		total++
		if err := c.Check(ctx, f); err != nil {
			fmt.Fprintln(a.stderr, shown(err.Error()))
			failed++
			continue
		}
		fmt.Fprintf(a.stdout, "ok %s\n", shown(f))
	}
	return failed, total, nil
}

// pluginPaths returns the paths of the plugins named under plugins:, which
// dev and run load besides the rules folder; none when c is nil.
func (c *fileConfig) pluginPaths() []string {
	if c == nil {
		return nil
	}
	var ps []string
	for _, p := range c.Plugins {
		ps = append(ps, p.Path)
	}
	sort.Strings(ps)
	return ps
}

// unmatchedRules reports each entry under rules: that matches none of
// files (the rule files of the folder dir, and the plugins), naming the config file and the entry's line:
// its settings apply to no rule, most likely a typo. None when c is nil.
func (c *fileConfig) unmatchedRules(dir string, files []string) []string {
	if c == nil {
		return nil
	}
	var msgs []string
	for _, name := range host.UnmatchedRules(c.hostRules(), files) {
		at := ""
		if line := c.ruleLine(name); line > 0 {
			at = fmt.Sprintf("line %d: ", line)
		}
		msgs = append(msgs, fmt.Sprintf("config %s: %srules: %q matches no rule file in %s (a typo?)", c.path, at, name, dir))
	}
	return msgs
}

// ruleLine returns the line of the entry name under rules: in the file, or
// 0 when it cannot tell.
func (c *fileConfig) ruleLine(name string) int {
	var doc yaml.Node
	if yaml.Unmarshal(c.raw, &doc) != nil || len(doc.Content) == 0 {
		return 0
	}
	rules := mapValue(doc.Content[0], "rules")
	if rules == nil {
		return 0
	}
	for i := 0; i+1 < len(rules.Content); i += 2 {
		if rules.Content[i].Value == name {
			return rules.Content[i].Line
		}
	}
	return 0
}

// mapValue returns the value of key in the YAML mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
