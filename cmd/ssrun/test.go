package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"sync"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/host"
	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// testCmd is `ssrun test`: the table-driven tests of rules (see testrun).
func (a *app) testCmd() *cobra.Command {
	var (
		runPat  string
		verbose bool
		asJSON  bool
		of      ociFlags
	)
	cmd := &cobra.Command{
		Use:   "test [DIR|FILE|DIR/...|oci://REF]...",
		Short: "Run the rules' test files (NAME.test.yaml, NAME_test.yaml) on a virtual clock",
		Long: `Run the rules' test files (NAME.test.yaml or NAME_test.yaml, next to the
rules) like go test: each case starts the folder's rules (or those the file
names) on the real host and an in-process store with a virtual clock,
applies its steps and checks what each step expects. DIR/... also runs the
folders below DIR; oci://REGISTRY/REPOSITORY:TAG (or @sha256:DIGEST) runs
the tests of an artifact pushed with ssrun push.
The rules get the settings of their folder's ssrun.yaml. As in go test,
-run REGEX, -v and -json work with one dash too.

Exit status: 0 when every case passes, 1 when one fails, 2 on bad input
(a test file that does not parse, a rule that does not compile).`,
		RunE: func(cmd *cobra.Command, args []string) error {
			var re *regexp.Regexp
			if runPat != "" {
				var err error
				if re, err = regexp.Compile(runPat); err != nil {
					return usageError("--run %q: %v", runPat, err)
				}
			}
			for i, arg := range args {
				dir, closeRules, err := a.openRules(cmd.Context(), &of, arg)
				if err != nil {
					return err
				}
				defer func() { _ = closeRules() }() // a temporary folder
				args[i] = dir
			}
			return a.runTests(cmd.Context(), args, re, &testrun.Reporter{Out: a.stdout, Verbose: verbose, JSON: asJSON})
		},
	}
	of.register(cmd, false)
	cmd.Flags().StringVar(&runPat, "run", "", "run only the cases whose name (FILE/CASE, spaces as _) matches this regular expression")
	cmd.Flags().BoolVarP(&verbose, "verbose", "v", false, "print every case, passed or not")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per event, like go test -json")
	return cmd
}

// runTests finds and runs the test files named by args.
func (a *app) runTests(ctx context.Context, args []string, re *regexp.Regexp, rep *testrun.Reporter) error {
	paths, err := testrun.Find(args)
	if err != nil {
		return &exitError{code: 2, msg: "ssrun test: " + err.Error()}
	}
	rts, err := a.runtimesLua(nil, lua.Config{Rand: testrun.Rand}) // math.random seeded
	if err != nil {
		return err
	}
	defer a.closeRuntimesNow(rts)
	failed, err := testrun.Run(ctx, paths, testrun.Options{Runtimes: rts, Config: folderConfigs(), Run: re, Report: rep,
		Warn: func(w string) { fmt.Fprintln(a.stderr, "ssrun test: warning: "+w) }})
	if errors.Is(err, testrun.ErrBadInput) {
		return &exitError{code: 2, msg: "ssrun test: " + err.Error()}
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return &exitError{code: 1, msg: fmt.Sprintf("ssrun test: %d case(s) failed", failed)}
	}
	return nil
}

// folderConfigs returns the settings of a rule file from its folder's
// ssrun.yaml (read once per folder), as a host would give them.
func folderConfigs() func(path string) (host.RuleConfig, error) {
	var mu sync.Mutex
	cache := map[string]*fileConfig{}
	return func(p string) (host.RuleConfig, error) {
		mu.Lock()
		defer mu.Unlock()
		dir := filepath.Dir(p)
		cfg, seen := cache[dir]
		if !seen {
			var err error
			if cfg, err = rulesConfig(dir, ""); err != nil {
				return host.RuleConfig{}, err
			}
			cache[dir] = cfg
		}
		if cfg == nil {
			return host.RuleConfigFor(host.RuleConfig{}, nil, p), nil
		}
		return host.RuleConfigFor(cfg.Defaults.toHost(), cfg.hostRules(), p), nil
	}
}
