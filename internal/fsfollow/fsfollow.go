// Package fsfollow is the loop every file follower of ssrun runs (the rules
// folder, ssrun.yaml, the broker's ACL file): changes come in bursts (an
// editor's write-and-rename, a ConfigMap's ..data swap), so a follower acts
// once the watched folders have been quiet for a moment, not on each event.
package fsfollow

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Settle reads w's events and errors until ctx ends or w is closed. Each
// event is passed to onEvent (when not nil) and starts (or restarts) a quiet
// period of settle; when a quiet period ends without another event, onQuiet
// runs. Errors are passed to onError. Settle runs the callbacks on its own
// goroutine, one at a time.
func Settle(ctx context.Context, w *fsnotify.Watcher, settle time.Duration, onEvent func(fsnotify.Event), onError func(error), onQuiet func()) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if onEvent != nil {
				onEvent(ev)
			}
			timer.Reset(settle)
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			onError(err)
		case <-timer.C:
			onQuiet()
		}
	}
}
