// Package fsfollow is the loop every file follower of ssrun runs (the rules
// folder, ssrun.yaml, the broker's ACL file, the service account token of
// `ssrun run`). It acts on a change as soon as
// the change is whole, and never on a file that is still being written:
//
//   - A file written through an open descriptor counts once it is closed
//     (Linux reports the close of a file opened for writing; see Watcher).
//   - A rename into place, a symlink or folder created (the "..data" swap
//     of a Kubernetes ConfigMap volume) count at once.
//   - A file removed or renamed away counts once Options.Quiet passed
//     without it coming back: an editor that renames the old file to a
//     backup and writes the new one (vim) changes the file, it does not
//     remove it and add another.
//   - Changes that arrive together (an editor's write and rename, many
//     files copied at once) are reported together, once each: a report
//     waits for a short gathering window (Options.Gather) without another
//     completed change.
//   - When the kernel's event queue overflows (ErrOverflow), the folders
//     are read again and what changed since they were last seen is
//     reported as if its events had come (see rescan.go).
//   - Where the end of a write is not reported (other platforms), and for a
//     file written but not closed (a writer keeping its descriptor open), a
//     quiet period without events (Options.Quiet, Options.OpenQuiet) stands
//     in for the close.
package fsfollow

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of Options.
const (
	// DefaultGather is how long a completed change waits for the next one
	// of its burst before it is reported.
	DefaultGather = 2 * time.Millisecond
	// DefaultQuiet is how long the folders must be quiet before a change
	// is reported on a platform that does not report the end of a write;
	// a burst of completed changes that goes on is reported after it too.
	DefaultQuiet = 50 * time.Millisecond
	// DefaultOpenQuiet is how long a file written and not closed must be
	// quiet before it is reported anyway (a writer that keeps its file
	// open), where the end of a write is reported.
	DefaultOpenQuiet = time.Second
)

// Options of Follow. Zero durations take the defaults.
type Options struct {
	Gather    time.Duration
	Quiet     time.Duration
	OpenQuiet time.Duration
	// OnChange receives the paths whose change is whole (a path may be gone
	// by then: it was removed or renamed away), once per burst. Required.
	OnChange func(paths []string)
	// OnError receives the watcher's errors (e.g. ErrOverflow: events were
	// lost, and the folders were rescanned). Required.
	OnError func(error)
}

func (o *Options) defaults() {
	if o.Gather <= 0 {
		o.Gather = DefaultGather
	}
	if o.Quiet <= 0 {
		o.Quiet = DefaultQuiet
	}
	if o.OpenQuiet <= 0 {
		o.OpenQuiet = DefaultOpenQuiet
	}
}

// op is what happened to a path.
type op uint8

const (
	opWritten op = iota // content written through an open file: whole once closed
	opWhole             // closed after writing, renamed in, a link or folder made
	opGone              // removed or renamed away: whole unless it comes back within Quiet
	opAttr              // metadata changed: whole unless the file is being written
)

// event is one change in a watched folder.
type event struct {
	path string
	op   op
}

// Follow reads w's events and errors until ctx ends or w is closed, and
// reports the changed paths as the package documentation describes. It runs
// the callbacks on its own goroutine, one at a time.
func Follow(ctx context.Context, w *Watcher, o Options) {
	o.defaults()
	wait := o.OpenQuiet // for a file written and not (yet) closed
	if !w.closeEvents {
		wait = o.Quiet
	}
	gather, quiet, away := stoppedTimer(), stoppedTimer(), stoppedTimer()
	defer gather.Stop()
	defer quiet.Stop()
	defer away.Stop()
	open := map[string]bool{}  // written, not closed
	whole := map[string]bool{} // whole, not reported yet
	gone := map[string]bool{}  // removed or renamed away, not back yet
	var since time.Time        // of the oldest change in whole
	// report reports the whole paths and those of also (emptied), if any.
	report := func(also map[string]bool) {
		for p := range also {
			whole[p] = true
		}
		clear(also)
		if len(whole) == 0 {
			return
		}
		paths := make([]string, 0, len(whole))
		for p := range whole {
			paths = append(paths, p)
		}
		clear(whole)
		w.snap.note(paths) // their change is known: a rescan compares with it
		o.OnChange(paths)
	}
	handle := func(ev event) {
		delete(gone, ev.path) // any other event: it is back
		switch {
		case ev.op == opWritten || !w.closeEvents:
			open[ev.path] = true
			delete(whole, ev.path) // reported when closed
			quiet.Reset(wait)
		case ev.op == opAttr && open[ev.path]:
			quiet.Reset(wait)
		case ev.op == opGone:
			delete(open, ev.path)
			delete(whole, ev.path)
			gone[ev.path] = true
			away.Reset(o.Quiet)
		default:
			delete(open, ev.path)
			if len(whole) == 0 {
				since = time.Now()
			}
			whole[ev.path] = true
			// A burst that goes on is reported after Quiet anyway.
			gather.Reset(min(o.Gather, max(0, o.Quiet-time.Since(since))))
		}
		if len(open) == 0 {
			quiet.Stop()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.events:
			if !ok {
				return
			}
			handle(ev)
		case err, ok := <-w.errors:
			if !ok {
				return
			}
			if errors.Is(err, ErrOverflow) { // what the lost events said
				evs := w.snap.rescan()
				for _, ev := range evs {
					handle(ev)
				}
				err = fmt.Errorf("%w; the folders were rescanned: %d changes found", err, len(evs))
			}
			o.OnError(err)
		case <-gather.C:
			report(nil)
		case <-away.C: // not back
			gather.Stop()
			report(gone)
		case <-quiet.C:
			// No close came: the writer keeps its file open, or the
			// platform does not say.
			gather.Stop()
			report(open)
		}
	}
}

func stoppedTimer() *time.Timer {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}

// EndOfWrite says whether w learns that a write is over (the close of a
// file opened for writing): true on Linux. Elsewhere every change waits for
// Options.Quiet.
func (w *Watcher) EndOfWrite() bool { return w.closeEvents }
