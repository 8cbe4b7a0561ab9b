package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/ssrun/ssrun/host/rulefile"
)

// LoadDir loads every rule file in dir, up to Config.LoadConcurrency of them
// at once, starting them in name order. A file that fails is reported
// (logged with its name) and skipped; the others load. The returned error
// joins every failure, in name order, each naming its file. When ctx ends,
// the files not started yet are not loaded and ctx's error is returned
// with the failures. Load, Remove and Close wait for LoadDir to end (Close
// makes the loads in progress fail, and the rest not start).
func (h *Host) LoadDir(ctx context.Context, dir string) error {
	files, err := rulefile.List(dir, h.runtimes, func(p string, info os.FileInfo) { rulefile.WarnNotRule(h.log, p, info) })
	if err != nil {
		return err
	}
	if err := h.lockLoads(ctx); err != nil {
		return fmt.Errorf("load %s: %w", dir, err)
	}
	defer h.unlockLoads()
	errs := make([]error, len(files)+1)
	var next atomic.Int64
	var skipped atomic.Bool // a file was not loaded: ctx ended or Close began
	var wg sync.WaitGroup
	for range min(len(files), h.loadConc) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				if ctx.Err() != nil || h.closing.Err() != nil {
					skipped.Store(true)
					return
				}
				if err := h.loadOne(ctx, files[i]); err != nil {
					h.logNotLoaded(files[i], err)
					errs[i] = err
				}
			}
		})
	}
	wg.Wait()
	if skipped.Load() {
		switch {
		case ctx.Err() != nil:
			errs[len(files)] = ctx.Err()
		case h.closing.Err() != nil:
			errs[len(files)] = fmt.Errorf("load %s: %w", dir, ErrClosed)
		}
	}
	return errors.Join(errs...)
}

// loadOne is Load of one file of LoadDir, the loads lock held.
func (h *Host) loadOne(ctx context.Context, path string) error {
	if h.group != nil && h.group.Standby(path) {
		return nil // another host of the group runs it
	}
	return h.loadLocked(ctx, path)
}
