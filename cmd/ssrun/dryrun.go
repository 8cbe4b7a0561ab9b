package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/host/provenance"
	"github.com/ssrun/ssrun/host/staging"
)

// dryRunFlag registers --dry-run on cmd (dev and run).
func dryRunFlag(cmd *cobra.Command, on *bool) {
	cmd.Flags().BoolVar(on, "dry-run", false,
		"run the rules on live notifications but send none of their writes, locks or timers to the store: print each one on stdout instead")
}

// stagedWriteJSON is a dry run's write as one JSON object (--log-format json).
type stagedWriteJSON struct {
	DryRun      string            `json:"dry_run"` // the op: SET, DEL, VDEL, LOCK or UNLOCK
	Rule        string            `json:"rule"`
	Key         string            `json:"key"`
	Value       *string           `json:"value,omitempty"`        // when it is UTF-8
	ValueBase64 []byte            `json:"value_base64,omitempty"` // when it is not
	TTLMs       int64             `json:"ttl_ms,omitempty"`
	Cond        string            `json:"cond,omitempty"`
	Fence       string            `json:"fence,omitempty"`
	Error       string            `json:"error,omitempty"` // why it was not staged
	Note        string            `json:"note,omitempty"`  // why a harmless write changed nothing
	Cause       *provenance.Cause `json:"cause,omitempty"` // the event the rule handled
}

// printStagedWrites returns the host.Config.DryRun that prints each write on
// w: one line (staging.Write.String), or one JSON object per line when
// format is "json".
func printStagedWrites(w io.Writer, format string) func(staging.Write) {
	var mu sync.Mutex // rules run in parallel
	return func(s staging.Write) {
		line := s.String()
		if format == "json" {
			j := stagedWriteJSON{DryRun: s.Op, Rule: s.Rule, Key: s.Key, TTLMs: s.TTL.Milliseconds(), Cond: s.Cond, Fence: s.Fence, Error: s.Err, Note: s.Note}
			if s.Value != nil {
				if utf8.Valid(s.Value) {
					v := string(s.Value)
					j.Value = &v
				} else {
					j.ValueBase64 = s.Value
				}
			}
			if s.Cause != (provenance.Cause{}) {
				j.Cause = &s.Cause
			}
			b, err := json.Marshal(j)
			if err != nil { // not reached: every field marshals
				b = []byte(fmt.Sprintf(`{"dry_run":%q,"error":%q}`, s.Op, err))
			}
			line = string(b)
		}
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(w, line)
	}
}
