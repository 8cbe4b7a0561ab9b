package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/admin"
)

func (a *app) statusCmd() *cobra.Command {
	var f adminClientFlags
	cmd := &cobra.Command{
		Use:   "status [--admin ADDR] [-o json]",
		Short: "Show the rules of a running ssrun: version, state, counts, last error",
		Long: `Show the rules of a running ssrun dev or run (started with --admin): each rule's kind, version
(content hash), state, events handled / failed / dropped, mailbox depth, watches, locks and timers,
events coalesced (mode latest, a full mailbox), restarted (mode restart) and in flight (concurrency),
and its last error with its time; then the host's counters. -o json prints the /status document.

Exit status: 0 done, 2 usage or connection error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := f.check(); err != nil {
				return err
			}
			body, err := adminGet(cmd.Context(), &f, "/status", nil)
			if err != nil {
				return err
			}
			return showAdmin(a.stdout, &f, body, printStatus)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

// printStatus writes doc as a table of rules, their details (watches,
// locks, last error) and the host's counters.
func printStatus(w io.Writer, doc admin.StatusDoc) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKIND\tVERSION\tSTATE\tHANDLED\tFAILED\tDROPPED\tQUEUED\tWATCHES\tLOCKS\tTIMERS")
	for _, r := range doc.Rules {
		queued := "-"
		if r.Queued != nil {
			queued = strconv.Itoa(*r.Queued)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%d\t%d\t%d\n", shown(r.Name), shown(r.Kind), shown(r.Hash), shown(r.State),
			r.Handled, r.Failed, r.Dropped, queued, len(r.Watches), len(r.Locks), r.Timers)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range doc.Rules {
		var lines []string
		if len(r.Watches) > 0 {
			lines = append(lines, "watches: "+shownAll(r.Watches, ", "))
		}
		if len(r.Patterns) > 0 {
			lines = append(lines, fmt.Sprintf("patterns: %s (%d keys)", shownAll(r.Patterns, ", "), r.PatternKeys))
		}
		if len(r.Locks) > 0 {
			lines = append(lines, "locks:   "+shownAll(r.Locks, ", "))
		}
		if r.Coalesced > 0 || r.Restarted > 0 || r.InFlight > 0 {
			lines = append(lines, fmt.Sprintf("events:  %d coalesced, %d restarted, %d in flight", r.Coalesced, r.Restarted, r.InFlight))
		}
		if r.LastError != "" {
			at := "?"
			if r.LastErrorAt != nil {
				at = r.LastErrorAt.UTC().Format(time.RFC3339Nano)
			}
			lines = append(lines, fmt.Sprintf("last error at %s: %s", at, shown(r.LastError)))
		}
		if r.NextRetry != nil {
			lines = append(lines, "loaded again at "+r.NextRetry.UTC().Format(time.RFC3339Nano)+" (its start failed)")
		}
		if len(lines) > 0 {
			fmt.Fprintf(w, "\n%s (%s)\n  %s\n", shown(r.Name), shown(r.Path), strings.Join(lines, "\n  "))
		}
	}
	h := doc.Host
	_, err := fmt.Fprintf(w, "\nhost: %d notifications, %d watched keys, %d loops damped, %d resyncs, %d stuck calls, %d timers\n",
		h.Notifications, h.WatchedKeys, h.LoopsDamped, h.Resyncs, h.Stuck, h.Timers)
	if p := h.Patterns; err == nil && p != nil {
		_, err = fmt.Fprintf(w, "patterns: %d watched, %d scans (%d pages), %d keys found late, %d over max_watched_keys, %d scan errors\n",
			p.Watched, p.Scans, p.Pages, p.FoundLate, p.OverLimit, p.ScanErrors)
	}
	if err == nil && h.Owned+h.Standby+h.Withdrawn > 0 {
		_, err = fmt.Fprintf(w, "group: %d rule(s) owned here, %d on standby (run by another host)\n", h.Owned, h.Standby)
		if err == nil && h.Withdrawn > 0 {
			_, err = fmt.Fprintf(w, "group: %d rule(s) withdrawn: their version here fails to load, another host offers them\n", h.Withdrawn)
		}
	}
	return err
}
