package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/ssrun/ssrun/internal/fsfollow"
	"github.com/ssrun/ssrun/protocol"
)

// watchToken re-authenticates client (MQTT 5 AUTH with the K8S-SAT method)
// whenever the service account token in file changes. Kubernetes rotates a
// projected token by swapping a symlink in its directory, so the directory is
// watched, not the file. The returned stop function ends the watch and waits
// for it.
func (a *app) watchToken(ctx context.Context, client *protocol.Client, file string) (stop func(), err error) {
	w, err := fsfollow.New()
	if err != nil {
		return nil, fmt.Errorf("watch SAT file: %w", err)
	}
	if err := w.Add(filepath.Dir(file)); err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("watch SAT file %s: %w", file, err)
	}
	last, _ := readSecretFile(file)
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		fsfollow.Follow(ctx, w, fsfollow.Options{
			OnChange: func([]string) { // a rotation is whole: re-read the token
				tok, err := readSecretFile(file)
				if err != nil || bytes.Equal(tok, last) {
					return
				}
				last = tok
				rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
				err = client.Reauthenticate(rctx)
				rcancel()
				switch {
				case err == nil:
					a.log.Info("service account token rotated: re-authenticated", "file", file)
				case ctx.Err() != nil:
				default:
					a.log.Warn("re-authentication with the rotated token failed; the next connection uses it", "file", file, "err", err)
				}
			},
			OnError: func(err error) { a.log.Warn("watching the SAT file", "file", file, "err", err) },
		})
	})
	return func() { cancel(); wg.Wait(); _ = w.Close() }, nil
}
