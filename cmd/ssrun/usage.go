package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
)

// strictUsage makes command-line mistakes under root exit with status 2 and
// show the usage line of the command concerned: a wrong number of
// arguments, a bad flag, and an unknown subcommand of a command that only
// groups others (`ssrun kv frob`), which cobra would otherwise answer with
// its help and status 0.
func strictUsage(root *cobra.Command) {
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageError("%v\nusage: %s", err, cmd.UseLine())
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if check := c.Args; check != nil {
			c.Args = func(cmd *cobra.Command, args []string) error {
				if err := check(cmd, args); err != nil {
					return usageError("%s: %v\nusage: %s", cmd.CommandPath(), err, cmd.UseLine())
				}
				return nil
			}
		}
		if c.HasParent() && c.HasSubCommands() && !c.Runnable() {
			c.RunE = groupRun
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// groupRun runs a command that only groups subcommands: alone, it shows its
// help; with an argument, that argument is no subcommand of it.
func groupRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	var names []string
	for _, sub := range cmd.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra's own default
	}
	hint := ""
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		hint = fmt.Sprintf(" (did you mean %s?)", strings.Join(s, " or "))
	}
	return usageError("unknown command %q for %q%s: want one of %s\nusage: %s COMMAND",
		args[0], cmd.CommandPath(), hint, strings.Join(names, ", "), cmd.CommandPath())
}
