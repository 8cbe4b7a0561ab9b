package main

import (
	"context"
	"time"

	"github.com/ssrun/ssrun/protocol"
)

// watchToken re-authenticates client (MQTT 5 AUTH with the K8S-SAT method)
// whenever the service account token in file changes. Kubernetes rotates a
// projected token by swapping a symlink in its directory, so the directory is
// watched, not the file. The returned stop function ends the watch and waits
// for it.
func (a *app) watchToken(ctx context.Context, client *protocol.Client, file string) (stop func(), err error) {
	return a.followFile(ctx, "SAT file", file, func(ctx context.Context, _ []byte) {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		err := client.Reauthenticate(rctx)
		rcancel()
		switch {
		case err == nil:
			a.log.Info("service account token rotated: re-authenticated", "file", file)
		case ctx.Err() != nil:
		default:
			a.log.Warn("re-authentication with the rotated token failed; the next connection uses it", "file", file, "err", err)
		}
	})
}
