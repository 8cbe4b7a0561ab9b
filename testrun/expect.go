package testrun

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// check compares the engine after a step, which logged logs and wrote
// writes, with e and returns the differences, one block per expectation
// that failed.
func (en *engine) check(ctx context.Context, e *Expect, logs, writes []string) []string {
	if e == nil {
		return nil
	}
	var out []string
	if e.Writes != nil && !slices.Equal(*e.Writes, writes) {
		out = append(out, "writes (- want, + got):\n"+diffLines(*e.Writes, writes))
	}
	for _, k := range sortedKeys(e.Store) {
		want := e.Store[k]
		got, ok, err := en.value(ctx, k)
		switch {
		case err != nil:
			out = append(out, fmt.Sprintf("store %s: %v", k, err))
		case want == nil && ok:
			out = append(out, fmt.Sprintf("store %s: want absent, got %q", k, got))
		case want != nil && !ok:
			out = append(out, fmt.Sprintf("store %s: want %q, got absent", k, *want))
		case want != nil && string(got) != *want:
			out = append(out, fmt.Sprintf("store %s: want %q, got %q", k, *want, got))
		}
	}
	for _, s := range e.Logs {
		if !slices.ContainsFunc(logs, func(l string) bool { return strings.Contains(l, s) }) {
			out = append(out, fmt.Sprintf("logs: no line contains %q", s))
		}
	}
	for _, s := range e.NoLogs {
		if i := slices.IndexFunc(logs, func(l string) bool { return strings.Contains(l, s) }); i >= 0 {
			out = append(out, fmt.Sprintf("no_logs: %q logged: %s", s, logs[i]))
		}
	}
	for _, name := range sortedKeys(e.Timers) {
		got, ok := en.h.TimerNames(en.paths[name])
		if !ok {
			out = append(out, fmt.Sprintf("timers: no such rule %q", name))
			continue
		}
		want := slices.Sorted(slices.Values(e.Timers[name]))
		if !slices.Equal(want, got) {
			out = append(out, fmt.Sprintf("timers of %s: want %q, got %q", name, want, got))
		}
	}
	for _, name := range sortedKeys(e.Status) {
		st, ok := en.status(name)
		if !ok {
			out = append(out, fmt.Sprintf("status: no such rule %q", name))
			continue
		}
		want := e.Status[name]
		if !want.Match(st.Handled, st.Failed, st.Coalesced, st.Dropped) {
			out = append(out, fmt.Sprintf("status of %s: want %s, got %s", name, want, want.Got(st.Handled, st.Failed, st.Coalesced, st.Dropped)))
		}
	}
	if len(out) > 0 {
		out = append(out, "logged during the step:"+indentList(logs))
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func indentList(lines []string) string {
	if len(lines) == 0 {
		return " nothing"
	}
	return "\n        " + strings.Join(lines, "\n        ")
}

// diffLines is a line diff of want and got (longest common subsequence):
// "  " both, "- " only wanted, "+ " only got.
func diffLines(want, got []string) string {
	var b strings.Builder
	for _, e := range editScript(want, got) {
		switch e.kind {
		case '=':
			fmt.Fprintf(&b, "      %s\n", want[e.i])
		case '-':
			fmt.Fprintf(&b, "    - %s\n", want[e.i])
		default:
			fmt.Fprintf(&b, "    + %s\n", got[e.j])
		}
	}
	if len(want) == 0 && len(got) == 0 {
		b.WriteString("    (none)\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}
