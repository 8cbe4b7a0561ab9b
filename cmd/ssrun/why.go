package main

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"time"

	"github.com/spf13/cobra"
	"github.com/ssrun/ssrun/host/provenance"
)

func (a *app) whyCmd() *cobra.Command {
	var f adminClientFlags
	var rule string
	cmd := &cobra.Command{
		Use:   "why KEY [--rule NAME] [--admin ADDR] [-o json]",
		Short: "Say which rule last wrote KEY, handling which event, and the chain back to the outside write",
		Long: `Ask a running ssrun dev or run (started with --admin) why KEY has its value: the rule that last
wrote it, with the value (its first 256 bytes), version and time; the event the rule was handling
(key, op, version, and the rule or client that caused it); and the chain of rule writes back to the
change from outside the rules that started it, with the client that made it when the store names
it (ssrun's embedded broker does). The host keeps the last write of the 4096 most recently written
keys, in memory. -o json prints the /why document.

With --rule NAME (a rule's file name), say instead why that rule did not react to KEY's last
change: not watched, its watch permission, the echo of its own write, a damped loop, a full
mailbox, another host of the group owns it, disabled or failing, a dry run, not loaded yet (or
that it did react). -o json prints the /whynot document.

Exit status: 0 done, 1 no rule wrote KEY (since ssrun started), 2 usage or connection error.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usageError("why takes one KEY, got %d arguments\nusage: ssrun %s", len(args), cmd.Use)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			if rule != "" {
				body, err := adminGet(cmd.Context(), &f, "/whynot", url.Values{"key": {args[0]}, "rule": {rule}})
				if err != nil {
					return err
				}
				return showAdmin(a.stdout, &f, body, printWhyNot)
			}
			body, err := adminGet(cmd.Context(), &f, "/why", url.Values{"key": {args[0]}})
			var nf *errAdminNotFound
			if errors.As(err, &nf) {
				return &exitError{code: 1, msg: shown(args[0]) + ": " + shown(nf.msg)}
			}
			if err != nil {
				return err
			}
			return showAdmin(a.stdout, &f, body, printWhy)
		},
	}
	f.register(cmd.Flags())
	cmd.Flags().StringVar(&rule, "rule", "", "say why the rule `NAME` (its file name) did not react to KEY's last change")
	return cmd
}

// printWhy writes w for people: the write, the event handled, the chain.
// Keys, versions, rule file names and client ids come from outside: each is
// shown (quoted when it holds control characters).
func printWhy(out io.Writer, w provenance.Write) error {
	value := strconv.Quote(w.Value)
	if w.Truncated {
		value += fmt.Sprintf(" (first %d of %d bytes)", len(w.Value), w.ValueSize)
	}
	at := w.At.UTC().Format(time.RFC3339Nano)
	switch w.Op {
	case "SET":
		fmt.Fprintf(out, "%s = %s, version %s\n", shown(w.Key), value, shown(w.Version))
		fmt.Fprintf(out, "  set by %s at %s\n", shown(w.Rule), at)
	default:
		fmt.Fprintf(out, "%s deleted (%s) by %s at %s\n", shown(w.Key), shown(w.Op), shown(w.Rule), at)
	}
	ev := w.Event
	if ev.Op == "" {
		_, err := fmt.Fprintf(out, "  outside a handler (while the rule loaded, or from a plugin's own goroutine)\n")
		return err
	}
	fmt.Fprintf(out, "  handling %s %s", shown(ev.Op), shown(ev.Key))
	if ev.Version != "" {
		fmt.Fprintf(out, ", version %s", shown(ev.Version))
	}
	switch {
	case ev.Resync:
		fmt.Fprint(out, " (resync: a change found after a reconnect)")
	case ev.Rule != "":
		fmt.Fprintf(out, ", written by rule %s", shown(ev.Rule))
	case ev.Client != "":
		fmt.Fprintf(out, ", written by client %s", shown(ev.Client))
	case ev.Op == "TIMER" || ev.Op == "LOCK_LOST":
	default:
		fmt.Fprint(out, ", from outside the rules (the store does not name the writer)")
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "chain:")
	if o := w.Origin; o != nil {
		by := "by client " + shown(o.Client)
		if o.Client == "" {
			by = "from outside the rules (the store does not name the writer)"
		}
		fmt.Fprintf(out, "  %s %s %s, version %s\n", shown(o.Op), shown(o.Key), by, shown(o.Version))
	} else {
		fmt.Fprintf(out, "  %s %s (no outside write)\n", shown(ev.Op), shown(ev.Key))
	}
	for _, s := range w.Chain {
		fmt.Fprintf(out, "  -> %s: %s %s", shown(s.Rule), shown(s.Op), shown(s.Key))
		if s.Version != "" {
			fmt.Fprintf(out, ", version %s", shown(s.Version))
		}
		fmt.Fprintln(out)
	}
	return nil
}
