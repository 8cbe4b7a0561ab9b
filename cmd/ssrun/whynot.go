package main

import (
	"fmt"
	"io"

	"github.com/ssrun/ssrun/admin"
)

// printWhyNot writes d for people: one line per reason, the main one
// first. Keys, rule names and the reasons' text (which holds versions and
// errors) come from outside: each is shown.
func printWhyNot(out io.Writer, d admin.WhyNotDoc) error {
	if _, err := fmt.Fprintf(out, "why %s did not react to %s:\n", shown(d.Rule), shown(d.Key)); err != nil {
		return err
	}
	for _, r := range d.Reasons {
		if _, err := fmt.Fprintf(out, "  %s: %s\n", r.Code, shown(r.Text)); err != nil {
			return err
		}
	}
	return nil
}
