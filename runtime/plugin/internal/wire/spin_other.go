//go:build !unix

package wire

import (
	"context"
	"time"
)

// spinRead never tries: it is for unix sockets (see spin_unix.go).
func (c *Conn[S, R]) spinRead(context.Context, []byte, time.Duration) (int, bool, error) {
	return 0, false, nil
}
