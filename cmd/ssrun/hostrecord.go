package main

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/testrun"
)

// recordFlag registers --record on cmd (dev and run).
func recordFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVar(path, "record", "",
		"write a trace of what the rules see (events, store requests and replies, clock readings, lock and fencing outcomes) to this file, for ssrun replay")
}

// openRecorder creates the trace file of --record and its recorder (nil
// without --record). done closes the file once the host has stopped, and
// reports the first error writing it.
func (a *app) openRecorder() (rec *testrun.HostRecorder, done func() error, err error) {
	if a.recordPath == "" {
		return nil, func() error { return nil }, nil
	}
	f, err := os.OpenFile(a.recordPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("record: %w", err)
	}
	hr, err := testrun.NewHostRecorder(f, time.Now())
	if err != nil {
		_ = f.Close()
		return nil, nil, fmt.Errorf("record %s: %w", a.recordPath, err)
	}
	a.log.Info("recording what the rules see", "file", a.recordPath)
	return hr, func() error {
		err := errors.Join(hr.Err(), f.Close())
		if err != nil {
			return fmt.Errorf("record %s: %w", a.recordPath, err)
		}
		a.log.Info("recorded what the rules saw", "file", a.recordPath, "records", hr.Records())
		return nil
	}, nil
}
