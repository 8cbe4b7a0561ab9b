package main

import (
	"strings"

	"github.com/spf13/cobra"
)

// goTestFlags are the flags of `ssrun test` that go test spells with one
// dash: -run REGEX, -v, -json (and -run=REGEX, -v=true, -json=false).
var goTestFlags = []string{"run", "v", "json"}

// normalizeTestArgs returns args with go test's single-dash flags of
// `ssrun test` spelled as cobra parses them (--run, --json; -v is a
// shorthand already, -v=false becomes --verbose=false), so that
// `ssrun test -run Clamp -v -json ./...` means what it means to go test.
// Other commands' arguments, and anything after "--", are left alone.
func normalizeTestArgs(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.Name() != "test" || cmd.Parent() != root {
		return args
	}
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "--") {
			continue
		}
		name, value, hasValue := strings.Cut(a[1:], "=")
		for _, f := range goTestFlags {
			if name != f || name == "v" && !hasValue {
				continue
			}
			if name == "v" {
				name = "verbose"
			}
			out[i] = "--" + name
			if hasValue {
				out[i] += "=" + value
			}
		}
	}
	return out
}
