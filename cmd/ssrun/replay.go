package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// maxDiffs is how many differing writes `ssrun replay --diff` prints.
const maxDiffs = 10

// replayCmd is `ssrun replay`: rules run against a trace of `ssrun record`
// on a virtual clock (see testrun.Replay).
func (a *app) replayCmd() *cobra.Command {
	var (
		against string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "replay TRACE DIR [--diff DIR2]",
		Short: "Run the rules in DIR against a recorded trace and print the writes they would make",
		Long: `Run the rules in DIR against TRACE (written by ssrun record) on an
in-memory store with a virtual clock, and print the writes they would make,
one per line: the virtual time since the trace's start, its cause (the
trace line, a timer, or the rules' start), the rule, and the write. The
same trace and rules always print the same output. Nothing is sent to any
store. The rules get the settings of DIR's ssrun.yaml.

--diff DIR2 runs the rules of DIR2 on the same trace as well and prints the
first writes that differ (- DIR, + DIR2): what a change would do
differently.

Exit status: 0 done (with --diff: no difference), 1 the two versions
differ, 2 bad input (a trace that does not parse, names its file and line;
a rule that does not compile).`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.replay(cmd.Context(), args[0], args[1], against, asJSON)
		},
	}
	cmd.Flags().StringVar(&against, "diff", "", "also replay the rules of this folder and print where their writes differ")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per write")
	return cmd
}

func (a *app) replay(ctx context.Context, tracePath, dir, against string, asJSON bool) error {
	tr, err := testrun.ReadTrace(tracePath)
	if err != nil {
		return &exitError{code: 2, msg: "ssrun replay: " + err.Error()}
	}
	if tr.Truncated {
		fmt.Fprintf(a.stderr, "ssrun replay: %s: the last line is incomplete (recorder killed?): ignored\n", tracePath)
	}
	rts, err := a.runtimesLua(nil, lua.Config{Rand: testrun.Rand}) // math.random seeded
	if err != nil {
		return err
	}
	defer a.closeRuntimesNow(rts)
	opts := testrun.ReplayOptions{Runtimes: rts, Config: folderConfigs(), Log: func(l string) { fmt.Fprintln(a.stderr, "replay: "+l) }}
	run := func(dir string) ([]testrun.Write, error) {
		w, err := testrun.Replay(ctx, tr, dir, opts)
		if errors.Is(err, testrun.ErrBadInput) {
			return nil, &exitError{code: 2, msg: "ssrun replay: " + err.Error()}
		}
		return w, err
	}
	writes, err := run(dir)
	if err != nil {
		return err
	}
	if against == "" {
		return testrun.PrintWrites(a.stdout, writes, asJSON)
	}
	other, err := run(against)
	if err != nil {
		return err
	}
	diffs := testrun.DiffWrites(writes, other, maxDiffs)
	if len(diffs) == 0 {
		fmt.Fprintf(a.stdout, "no difference: %d write(s) on %d record(s)\n", len(writes), len(tr.Records))
		return nil
	}
	fmt.Fprintf(a.stdout, "%s and %s differ on %s (- %s, + %s):\n%s\n", dir, against, tracePath, dir, against, strings.Join(diffs, "\n"))
	return &exitError{code: 1, msg: fmt.Sprintf("ssrun replay: %s and %s make different writes (%d, %d)", dir, against, len(writes), len(other))}
}
