package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/ssrun/ssrun/protocol"
)

// watchToken re-authenticates client (MQTT 5 AUTH with the K8S-SAT method)
// whenever the service account token in file changes. Kubernetes rotates a
// projected token by swapping a symlink in its directory, so the directory is
// watched, not the file. The returned stop function ends the watch and waits
// for it.
func (a *app) watchToken(ctx context.Context, client *protocol.Client, file string) (stop func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watch SAT file: %w", err)
	}
	if err := w.Add(filepath.Dir(file)); err != nil {
		w.Close()
		return nil, fmt.Errorf("watch SAT file %s: %w", file, err)
	}
	last, _ := os.ReadFile(file)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer w.Close()
		settle := time.NewTimer(time.Hour)
		settle.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-w.Events:
				if !ok {
					return
				}
				settle.Reset(50 * time.Millisecond) // a rotation is several events
			case err, ok := <-w.Errors:
				if !ok {
					return
				}
				a.log.Warn("watching the SAT file", "file", file, "err", err)
			case <-settle.C:
				tok, err := os.ReadFile(file)
				if err != nil || bytes.Equal(tok, last) {
					continue
				}
				last = tok
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				err = client.Reauthenticate(rctx)
				rcancel()
				switch {
				case err == nil:
					a.log.Info("service account token rotated: re-authenticated", "file", file)
				case ctx.Err() != nil:
					return
				default:
					a.log.Warn("re-authentication with the rotated token failed; the next connection uses it", "file", file, "err", err)
				}
			}
		}
	}()
	return func() { cancel(); wg.Wait() }, nil
}
