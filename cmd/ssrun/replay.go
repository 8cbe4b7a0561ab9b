package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/runtime/lua"
	"github.com/ssrun/ssrun/testrun"
)

// maxDiffs is how many differences `ssrun replay --diff` prints as text.
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
		Long: `Run the rules in DIR against TRACE (written by ssrun record) on the
real host and an in-process store with a virtual clock, and print the
writes they would make,
one per line: the virtual time since the trace's start, its cause (the
trace line, a timer, or the rules' start), the rule, and the write. The
same trace and rules always print the same output. Nothing is sent to any
store. The rules get the settings of DIR's ssrun.yaml.

A trace recorded inside a host (ssrun dev --record, ssrun run --record)
is replayed on what the rules saw: each recorded event is handled by its
rule, and every request the rule makes is answered with the reply the
live run got for the same request (a write refused FENCED live is refused
again; now() reads the recorded clock). Every write is printed, with its
outcome when it was not OK. A request the live run did not make, or made
differently, and one it made that the replay did not, are printed after
the writes as differences, with exit status 1.

--diff DIR2 runs the rules of DIR2 on the same trace as well and prints
where their writes differ (- DIR, + DIR2), aligned as a line diff is: a
write only one version makes is one difference, not a change of every
write after it. With --json, each difference is one JSON object
({"diff":{"a":N,"b":M,"removed":[...],"added":[...]}}).

Exit status: 0 done (with --diff: no difference), 1 the two versions
differ or the replay of a host trace parts from the recording, 2 bad input (a trace that does not parse, names its file and line;
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
	var mismatches []testrun.Mismatch
	opts := testrun.ReplayOptions{Runtimes: rts, Config: folderConfigs(), Log: func(l string) { fmt.Fprintln(a.stderr, "replay: "+l) },
		Mismatch: func(m testrun.Mismatch) { mismatches = append(mismatches, m) }}
	run := func(dir string) ([]testrun.Write, error) {
		mismatches = nil
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
		if err := testrun.PrintWrites(a.stdout, writes, asJSON); err != nil {
			return err
		}
		return a.printMismatches(tracePath, dir, mismatches, asJSON)
	}
	if len(mismatches) > 0 {
		fmt.Fprintf(a.stderr, "ssrun replay: %s parts from the recording %d time(s) (replay it without --diff to see where)\n", dir, len(mismatches))
	}
	other, err := run(against)
	if err != nil {
		return err
	}
	diffs := testrun.DiffWrites(writes, other)
	if err := a.printDiffs(tracePath, dir, against, diffs, asJSON); err != nil {
		return err
	}
	if len(diffs) == 0 {
		if !asJSON {
			fmt.Fprintf(a.stdout, "no difference: %d write(s) on %d record(s)\n", len(writes), len(tr.Records))
		}
		return nil
	}
	return &exitError{code: 1, msg: fmt.Sprintf("ssrun replay: %s and %s make different writes: %d difference(s) (%d and %d writes)", dir, against, len(diffs), len(writes), len(other))}
}

// printDiffs prints the differences between the writes of dir and
// against: the first maxDiffs as text, or each as one JSON object.
func (a *app) printDiffs(tracePath, dir, against string, diffs []testrun.WriteDiff, asJSON bool) error {
	if asJSON {
		for _, d := range diffs {
			if err := a.jsonLine(struct {
				Diff testrun.WriteDiff `json:"diff"`
			}{d}); err != nil {
				return err
			}
		}
		return nil
	}
	if len(diffs) == 0 {
		return nil
	}
	fmt.Fprintf(a.stdout, "%s and %s differ on %s in %d place(s) (- %s, + %s; write N / M: the Nth write of %s, the Mth of %s):\n",
		dir, against, tracePath, len(diffs), dir, against, dir, against)
	for i, d := range diffs {
		if i == maxDiffs {
			fmt.Fprintf(a.stdout, "… and %d more\n", len(diffs)-maxDiffs)
			break
		}
		fmt.Fprintln(a.stdout, d.String())
	}
	return nil
}

// printMismatches prints where the replay of a host trace parted from the
// recording, after the writes, and makes it exit status 1.
func (a *app) printMismatches(tracePath, dir string, ms []testrun.Mismatch, asJSON bool) error {
	if len(ms) == 0 {
		return nil
	}
	if !asJSON {
		fmt.Fprintf(a.stdout, "the rules in %s part from the recording %s:\n", dir, tracePath)
	}
	for _, m := range ms {
		if !asJSON {
			fmt.Fprintln(a.stdout, "  "+m.String())
			continue
		}
		if err := a.jsonLine(struct {
			Mismatch testrun.Mismatch `json:"mismatch"`
		}{m}); err != nil {
			return err
		}
	}
	return &exitError{code: 1, msg: fmt.Sprintf("ssrun replay: the rules in %s part from the recording %s (%d difference(s))", dir, tracePath, len(ms))}
}

// jsonLine prints v as one line of JSON on stdout.
func (a *app) jsonLine(v any) error {
	j, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(a.stdout, string(j))
	return err
}
