package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/ssrun/ssrun/protocol"
	"github.com/ssrun/ssrun/protocol/hlc"
	"github.com/ssrun/ssrun/testrun"
)

// recordCmd is `ssrun record`: what a host sees of some keys, to a trace
// file that `ssrun replay` runs rules against (format: testrun/trace.go).
func (a *app) recordCmd() *cobra.Command {
	var (
		o    kvOpts
		keys []string
	)
	cmd := &cobra.Command{
		Use:   "record --keys KEY[,KEY...] OUT",
		Short: "Record the values and changes of keys to a trace file for ssrun replay",
		Long: `Record what a host watching KEYs sees, until interrupted, to the trace
file OUT: first each key's value and version, then every notification (SET
with its value, DELETE) with its version and the time it arrived. A lost
connection is recorded, and the keys are read again when it comes back.

The file is JSON lines: a header {"ssrun_trace":2,...}, then one record per
line, each written whole, so a recorder killed mid-write loses at most its
last line. The state store notifies exact keys: list every key the rules
watch (wildcards are not supported).

This recorder is a client next to the rules, not inside their host: it
sees the keys' changes, not the rules' own requests and replies (locks,
fencing refusals, the host's clock). To record those, run the rules with
ssrun dev --record FILE or ssrun run --record FILE.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(keys) == 0 {
				return usageError("record: --keys is required")
			}
			return a.withClient(cmd, &o, func(ctx context.Context, c *protocol.Client) error {
				return a.record(ctx, c, keys, args[0])
			})
		},
	}
	o.conn.register(cmd.Flags(), "127.0.0.1:1883")
	cmd.Flags().DurationVar(&o.timeout, "timeout", 10*time.Second, "per-request timeout")
	cmd.Flags().StringSliceVar(&keys, "keys", nil, "the keys to record (comma-separated or repeated)")
	return cmd
}

// traceRecorder writes one trace.
type traceRecorder struct {
	c    *protocol.Client
	tw   *testrun.TraceWriter
	keys []string
	last int64              // the last clock reading, Unix ms
	seen map[string]hlc.HLC // per key: the newest version recorded
	n    int                // records written
}

// now is a clock reading that never goes back.
func (r *traceRecorder) now() int64 {
	r.last = max(r.last, time.Now().UnixMilli())
	return r.last
}

func (r *traceRecorder) write(rec testrun.Record) error {
	r.n++
	return r.tw.Write(rec)
}

// record records keys on c to the file out until ctx ends.
func (a *app) record(ctx context.Context, c *protocol.Client, keys []string, out string) (err error) {
	f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	defer func() {
		if cerr := f.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("record: %w", cerr)
		}
	}()
	r := &traceRecorder{c: c, keys: keys, seen: map[string]hlc.HLC{}}
	if r.tw, err = testrun.NewTraceWriter(f, testrun.TraceHeader{StartMs: r.now(), Keys: keys}); err != nil {
		return err
	}
	// Watch first, then read: a change between the two is in both, and
	// its notification is dropped as not newer than the read.
	if err := notifyKeys(ctx, c, "record", keys); err != nil {
		return err
	}
	if err := r.read(ctx); err != nil {
		return err
	}
	fmt.Fprintf(a.stderr, "recording %d key(s) to %s; Ctrl-C to stop\n", len(keys), out)
	defer func() { fmt.Fprintf(a.stderr, "recorded %d record(s) to %s\n", r.n, out) }()
	connected := true
	return eachEvent(ctx, c, "record", func(ev protocol.Event) error { return r.event(ctx, ev, &connected) })
}

// event records one event of the client.
func (r *traceRecorder) event(ctx context.Context, ev protocol.Event, connected *bool) error {
	switch ev.Kind {
	case protocol.EventNotify:
		k := string(ev.Key)
		if v, ok := r.seen[k]; ok && ev.Version.Compare(v) <= 0 {
			return nil // already recorded by a read
		}
		r.seen[k] = ev.Version
		rec := testrun.Record{TMs: r.now(), Kind: testrun.RecordNotify, Key: k, Op: ev.Op, Version: ev.Version.String()}
		if ev.Op == protocol.OpSet {
			rec.SetBytes(ev.Value)
		}
		return r.write(rec)
	case protocol.EventDisconnected:
		*connected = false
		return r.write(testrun.Record{TMs: r.now(), Kind: testrun.RecordDisconnected})
	case protocol.EventConnected, protocol.EventOverflow:
		if ev.Kind == protocol.EventConnected && *connected {
			return nil // the first connection: already read
		}
		*connected = true
		if err := r.read(ctx); err != nil {
			return err
		}
		return r.write(testrun.Record{TMs: r.now(), Kind: testrun.RecordConnected})
	}
	return nil
}

// read records the current value and version of every key.
func (r *traceRecorder) read(ctx context.Context) error {
	for _, k := range r.keys {
		g, err := r.c.Get(ctx, []byte(k), protocol.CallOptions{})
		if err != nil {
			return fmt.Errorf("record: read %q: %w", k, err)
		}
		rec := testrun.Record{TMs: r.now(), Kind: testrun.RecordGet, Key: k, Found: g.Found}
		if g.Found {
			rec.SetBytes(g.Value)
			rec.Version = g.Version.String()
			r.seen[k] = g.Version
		}
		if err := r.write(rec); err != nil {
			return err
		}
	}
	return nil
}
