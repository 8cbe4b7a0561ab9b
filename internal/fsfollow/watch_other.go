//go:build !linux

package fsfollow

import (
	"path/filepath"
	"sync"

	"github.com/fsnotify/fsnotify"
)

// This file is the watcher of platforms other than Linux, on fsnotify,
// which does not report the end of a write there: every change waits for
// Options.Quiet.

// ErrOverflow is reported when events were lost (Follow rescans the
// folders: see rescan.go).
var ErrOverflow = fsnotify.ErrEventOverflow

// Watcher reports the changes in the folders added to it. Its events end
// when it is closed; Follow reads them.
type Watcher struct {
	closeEvents bool // the end of a write is reported
	events      chan event
	errors      chan error
	snap        *snapshot // what the folders held, for a rescan

	w    *fsnotify.Watcher
	done chan struct{}
	wg   sync.WaitGroup
	once sync.Once
}

// New returns a Watcher that watches nothing yet.
func New() (*Watcher, error) {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	w := &Watcher{events: make(chan event, 64), errors: make(chan error), snap: newSnapshot(), w: fw, done: make(chan struct{})}
	w.wg.Go(w.read)
	return w, nil
}

// Add watches the folder dir (not its subfolders), and records what it
// holds for a rescan. Adding a folder twice is harmless.
func (w *Watcher) Add(dir string) error {
	dir = filepath.Clean(dir)
	if err := w.w.Add(dir); err != nil {
		return err
	}
	w.snap.add(dir)
	return nil
}

// Close stops the watcher and waits for its reader.
func (w *Watcher) Close() error {
	var err error
	w.once.Do(func() {
		close(w.done)
		err = w.w.Close()
		w.wg.Wait()
	})
	return err
}

// read passes fsnotify's events and errors on until the Watcher is closed.
func (w *Watcher) read() {
	defer close(w.events)
	for {
		select {
		case ev, ok := <-w.w.Events:
			if !ok {
				return
			}
			select {
			case w.events <- event{path: ev.Name, op: opWritten}:
			case <-w.done:
				return
			}
		case err, ok := <-w.w.Errors:
			if !ok {
				return
			}
			select {
			case w.errors <- err:
			case <-w.done:
				return
			}
		}
	}
}
